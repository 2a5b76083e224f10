//! Writing systems ([`Script`], [`ScriptSet`]) of text and of tokens, so that sampling keeps to
//! the scripts of the conversation.
//!
//! A small multilingual model drifts into another script mid-sentence (issue 33: `data科学`,
//! `other户外` in English options). [`LocalTokenizer`](crate::local::LocalTokenizer) computes
//! each token's scripts once ([`TokenScripts`]), and the decoder masks the tokens of scripts the
//! conversation does not use ([`ScriptFilter`]), in the same step as the grammar's mask.
//!
//! Scripts are Unicode's (UAX #24, the `unicode-script` crate), from each character's
//! `Script_Extensions` property:
//! - a character of **one** script (a letter, a Han ideograph, a kana) writes that script;
//! - a character **shared** by several scripts (CJK punctuation such as `。` and `、`, the kana
//!   prolonged sound mark `ー`, the Devanagari danda `।`, the Arabic comma `،`) is allowed when
//!   the conversation writes one of them, so `。` goes with Chinese, Japanese or Korean text but
//!   not into an English option;
//! - a character of no script (`Common` or `Inherited` without extensions: digits, Latin
//!   punctuation, symbols, emoji, white space, most combining marks; and unassigned or
//!   private-use code points) is neutral and always allowed.
//!
//! Two pairs count as one writing system: Hiragana with Katakana (Japanese kana), and Han with
//! Bopomofo (Chinese): a conversation writing one may write the other.
//!
//! A token's bytes may end inside a character (byte-level BPE splits rare characters): such a
//! tail counts with every script its possible completions could have, sampled at the
//! granularity of its next byte; bytes continuing a character begun in an earlier token are
//! neutral (that token was checked already).

use std::collections::HashMap;

use llguidance::toktrie::SimpleVob;
pub use unicode_script::Script;
use unicode_script::{ScriptExtension, UnicodeScript};

/// Scripts that count as one writing system (see the module docs).
const KINDRED: [[Script; 2]; 2] = [
    [Script::Hiragana, Script::Katakana],
    [Script::Han, Script::Bopomofo],
];

/// No script: the empty `Script_Extensions` value.
fn no_scripts() -> ScriptExtension {
    ScriptExtension::from(Script::Unknown)
}

/// What a text writes: the scripts it surely writes, and its characters shared by several
/// scripts (see the module docs). As the allowed set of a conversation, only the scripts it
/// surely writes count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScriptSet {
    /// The scripts of the characters of one script, with their kindred scripts.
    definite: ScriptExtension,
    /// The `Script_Extensions` of each shared character that `definite` does not already
    /// cover, none containing another (a character that fits in the smaller set fits in both).
    shared: Vec<ScriptExtension>,
}

impl Default for ScriptSet {
    fn default() -> Self {
        Self {
            definite: no_scripts(),
            shared: Vec::new(),
        }
    }
}

impl ScriptSet {
    /// The scripts of the characters of `text`.
    pub fn of_text(text: &str) -> Self {
        let mut scripts = Self::default();
        for character in text.chars() {
            scripts.add_character(character);
        }
        scripts
    }

    /// The scripts a token's bytes may write (see the module docs for a character cut at
    /// either end).
    pub fn of_bytes(bytes: &[u8]) -> Self {
        let mut scripts = Self::default();
        // Bytes that continue a character of an earlier token.
        let start = bytes
            .iter()
            .position(|byte| byte & 0xC0 != 0x80)
            .unwrap_or(bytes.len());
        let mut rest = &bytes[start..];
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => return scripts.union(&Self::of_text(text)),
                Err(error) => {
                    let (valid, tail) = rest.split_at(error.valid_up_to());
                    scripts = scripts.union(&Self::of_text(
                        std::str::from_utf8(valid).unwrap_or_default(),
                    ));
                    match error.error_len() {
                        // A character cut at the end of the token.
                        None => return scripts.union(&Self::of_partial(tail)),
                        Some(length) => rest = &tail[length..],
                    }
                }
            }
        }
        scripts
    }

    /// The scripts of the characters that may begin with `bytes`, an unfinished UTF-8 sequence:
    /// its possible code points, sampled once per value of the next byte.
    fn of_partial(bytes: &[u8]) -> Self {
        let Some(lead) = bytes.first() else {
            return Self::default();
        };
        let (length, lead_bits) = match lead {
            0xC0..=0xDF => (2, u32::from(lead & 0x1F)),
            0xE0..=0xEF => (3, u32::from(lead & 0x0F)),
            0xF0..=0xF7 => (4, u32::from(lead & 0x07)),
            _ => return Self::default(),
        };
        let known = bytes[1..].iter().fold(lead_bits, |value, byte| {
            (value << 6) | u32::from(byte & 0x3F)
        });
        let missing = length - bytes.len();
        // The next byte's 64 values, each followed by the smallest remaining bytes.
        let step = 1u32 << (6 * (missing - 1));
        let mut scripts = Self::default();
        (0..64u32)
            .map(|next| (((known << 6) | next) << (6 * (missing - 1))) + step / 2)
            .chain((0..64u32).map(|next| ((known << 6) | next) << (6 * (missing - 1))))
            .filter_map(char::from_u32)
            .for_each(|character| scripts.add_character(character));
        scripts
    }

    /// Adds what `character` writes (see the module docs).
    fn add_character(&mut self, character: char) {
        let scripts = character.script_extension();
        if scripts.is_common() || scripts.is_inherited() || scripts.is_empty() {
            return;
        }
        match Script::try_from(scripts) {
            Ok(script) => *self = std::mem::take(self).with(script),
            Err(()) => self.add_shared(scripts),
        }
    }

    /// Adds a shared character's scripts, unless a script it surely writes or a smaller
    /// shared set already covers them.
    fn add_shared(&mut self, scripts: ScriptExtension) {
        if !scripts.intersection(self.definite).is_empty()
            || self.shared.iter().any(|known| is_within(*known, scripts))
        {
            return;
        }
        self.shared.retain(|known| !is_within(scripts, *known));
        self.shared.push(scripts);
    }

    /// This set with `script` (and its kindred: see the module docs); `Common`, `Inherited`
    /// and `Unknown`, which no character writes as its own, add nothing.
    pub fn with(mut self, script: Script) -> Self {
        if matches!(script, Script::Common | Script::Inherited | Script::Unknown) {
            return self;
        }
        let kindred = KINDRED
            .into_iter()
            .find(|pair| pair.contains(&script))
            .unwrap_or([script, script]);
        for script in kindred {
            self.definite = self.definite.union(ScriptExtension::from(script));
        }
        let definite = self.definite;
        self.shared
            .retain(|scripts| scripts.intersection(definite).is_empty());
        self
    }

    /// Both sets' scripts.
    pub fn union(mut self, other: &Self) -> Self {
        for script in other.definite.iter() {
            self = self.with(script);
        }
        for scripts in &other.shared {
            self.add_shared(*scripts);
        }
        self
    }

    /// Whether a conversation that writes the scripts of `other` may write all of this set:
    /// each of its scripts is one `other` surely writes, and each of its shared characters
    /// belongs to one of them.
    pub fn is_subset_of(&self, other: &Self) -> bool {
        is_within(self.definite, other.definite)
            && self
                .shared
                .iter()
                .all(|scripts| !scripts.intersection(other.definite).is_empty())
    }

    /// Whether the set is empty (neutral text).
    pub fn is_empty(&self) -> bool {
        self.definite.is_empty() && self.shared.is_empty()
    }

    /// Whether the set surely writes `script` (a script of its own, not `Common`,
    /// `Inherited` or `Unknown`).
    pub fn contains(&self, script: Script) -> bool {
        !matches!(script, Script::Common | Script::Inherited | Script::Unknown)
            && self.definite.contains_script(script)
    }
}

/// Whether every script of `inner` is in `outer` (sets of specific scripts).
fn is_within(inner: ScriptExtension, outer: ScriptExtension) -> bool {
    inner.intersection(outer) == inner
}

/// The scripts of every token of a vocabulary, computed once per tokenizer: each distinct
/// [`ScriptSet`] once, and each token's index into them (a vocabulary has a few hundred
/// distinct sets for its ~150,000 tokens).
#[derive(Clone, Debug, Default)]
pub(crate) struct TokenScripts {
    sets: Vec<ScriptSet>,
    of_token: Vec<u32>,
}

impl TokenScripts {
    /// The scripts of `tokens`, by id: each token's bytes ([`ScriptSet::of_bytes`]), or `None`
    /// for a control token, which writes no script.
    pub(crate) fn new<'a>(tokens: impl IntoIterator<Item = Option<&'a [u8]>>) -> Self {
        let mut sets = vec![ScriptSet::default()];
        let mut index: HashMap<ScriptSet, u32> = HashMap::from([(ScriptSet::default(), 0)]);
        let of_token = tokens
            .into_iter()
            .map(|bytes| {
                let Some(bytes) = bytes else { return 0 };
                let scripts = ScriptSet::of_bytes(bytes);
                *index.entry(scripts).or_insert_with_key(|scripts| {
                    sets.push(scripts.clone());
                    u32::try_from(sets.len() - 1).unwrap_or(u32::MAX)
                })
            })
            .collect();
        Self { sets, of_token }
    }

    /// The scripts of token `id` (`None` past the vocabulary).
    #[cfg(test)]
    pub(crate) fn of(&self, id: u32) -> Option<&ScriptSet> {
        let index = *self.of_token.get(id as usize)?;
        self.sets.get(index as usize)
    }
}

/// The tokens a request may not sample: those of a script its conversation does not use.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScriptFilter {
    foreign: Vec<u32>,
}

impl ScriptFilter {
    /// The filter for a conversation written in `allowed`, over tokens of `token_scripts`:
    /// each distinct set is judged once.
    pub(crate) fn new(token_scripts: &TokenScripts, allowed: &ScriptSet) -> Self {
        let foreign_sets: Vec<bool> = token_scripts
            .sets
            .iter()
            .map(|scripts| !scripts.is_subset_of(allowed))
            .collect();
        let foreign = (0u32..)
            .zip(&token_scripts.of_token)
            .filter(|(_, set)| foreign_sets.get(**set as usize).copied().unwrap_or(false))
            .map(|(token, _)| token)
            .collect();
        Self { foreign }
    }

    /// How many tokens the filter masks.
    pub(crate) fn len(&self) -> usize {
        self.foreign.len()
    }

    /// The grammar's `mask` without the foreign tokens, unless that leaves nothing (then the
    /// grammar's mask as it is: the grammar always wins).
    pub(crate) fn restrict(&self, mask: SimpleVob) -> SimpleVob {
        if self.foreign.is_empty() {
            return mask;
        }
        let mut kept = mask.clone();
        for token in &self.foreign {
            if (*token as usize) < kept.len() {
                kept.disallow_token(*token);
            }
        }
        if kept.is_zero() { mask } else { kept }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latin() -> ScriptSet {
        ScriptSet::default().with(Script::Latin)
    }

    #[test]
    fn text_scripts_leave_digits_punctuation_and_emoji_neutral() {
        assert_eq!(ScriptSet::of_text("Lisbon, 3 days!"), latin());
        assert!(ScriptSet::of_text("42 — “…” 🙂 👍🏽 \n\t ½ € © ① ０１２").is_empty());
        assert!(ScriptSet::of_text("café naïve e\u{301}").is_subset_of(&ScriptSet::of_text("a")));
        let mixed = ScriptSet::of_text("data科学");
        assert!(mixed.contains(Script::Han) && mixed.contains(Script::Latin));
        assert!(!mixed.is_subset_of(&latin()));
        assert!(ScriptSet::of_text("Привет").contains(Script::Cyrillic));
        assert!(ScriptSet::of_text("Γειά").contains(Script::Greek));
        assert!(ScriptSet::of_text("नमस्ते").contains(Script::Devanagari));
        assert!(!ScriptSet::of_text("42").contains(Script::Common));
    }

    #[test]
    fn shared_punctuation_goes_with_the_scripts_that_use_it() {
        // CJK punctuation (Common, with Script_Extensions): with Chinese, Japanese or Korean
        // text, never into a Latin-only conversation.
        for mark in ["。", "、", "「", "」", "〜", "・"] {
            let scripts = ScriptSet::of_text(mark);
            assert!(!scripts.is_empty(), "{mark}");
            assert!(!scripts.is_subset_of(&latin()), "{mark}");
            for conversation in ["中文", "にほんご", "한국어"] {
                assert!(
                    scripts.is_subset_of(&ScriptSet::of_text(conversation)),
                    "{mark} in {conversation}"
                );
            }
        }
        // The kana prolonged sound mark belongs to kana only; a Chinese text has none.
        let long_vowel = ScriptSet::of_text("ー");
        assert!(long_vowel.is_subset_of(&ScriptSet::of_text("カタカナ")));
        assert!(!long_vowel.is_subset_of(&ScriptSet::of_text("中文")));
        // A shared character beside a script it belongs to adds nothing.
        assert_eq!(ScriptSet::of_text("中文。"), ScriptSet::of_text("中文"));
        // Devanagari's danda is shared by the Indic scripts.
        assert!(ScriptSet::of_text("।").is_subset_of(&ScriptSet::of_text("नमस्ते")));
        assert!(!ScriptSet::of_text("।").is_subset_of(&latin()));
        // Fullwidth Latin letters are Latin; fullwidth punctuation and digits are neutral.
        assert!(ScriptSet::of_text("ｄａｔａ").is_subset_of(&latin()));
    }

    #[test]
    fn kana_and_han_with_bopomofo_count_as_one_writing_system() {
        assert!(ScriptSet::of_text("カタカナ").is_subset_of(&ScriptSet::of_text("ひらがな")));
        assert!(ScriptSet::of_text("ひらがな").is_subset_of(&ScriptSet::of_text("カタカナ")));
        assert!(ScriptSet::of_text("ㄅㄆ").is_subset_of(&ScriptSet::of_text("中")));
        assert!(!ScriptSet::of_text("中").is_subset_of(&ScriptSet::of_text("ひらがな")));
        assert!(!ScriptSet::of_text("한").is_subset_of(&ScriptSet::of_text("中")));
        let conversation = ScriptSet::of_text("東京へ").union(&latin());
        assert!(conversation.contains(Script::Katakana));
        assert!(ScriptSet::of_text("東京タワー。OK").is_subset_of(&conversation));
        // `Common` and the like are no script of their own: `with` ignores them.
        assert!(ScriptSet::default().with(Script::Common).is_empty());
    }

    #[test]
    fn a_token_cut_inside_a_character_counts_with_its_completions() {
        let han = "学".as_bytes();
        assert!(ScriptSet::of_bytes(&han[..1]).contains(Script::Han));
        assert!(ScriptSet::of_bytes(&han[..2]).contains(Script::Han));
        // The rest of a character begun earlier is neutral.
        assert!(ScriptSet::of_bytes(&han[1..]).is_empty());
        let cyrillic = "д".as_bytes();
        assert_eq!(
            ScriptSet::of_bytes(&[b"a", &cyrillic[..1]].concat()),
            latin().with(Script::Cyrillic)
        );
        // "“" is E2 80 9C: the two bytes E2 80 start only punctuation (and spaces, one of
        // them shared by Latin and Mongolian), all allowed in a Latin conversation.
        assert!(ScriptSet::of_bytes(&"“".as_bytes()[..2]).is_subset_of(&latin()));
        // "。" is E3 80 82: E3 80 may still become Han, kana, a Hangul tone mark (U+302E) or
        // CJK punctuation.
        let cut = ScriptSet::of_bytes(&"。".as_bytes()[..2]);
        assert!(!cut.is_subset_of(&latin()));
        assert!(!cut.is_subset_of(&ScriptSet::of_text("日本語のテキスト")));
        assert!(cut.is_subset_of(&ScriptSet::of_text("日本語のテキスト 한국어")));
        assert_eq!(ScriptSet::of_bytes(" é".as_bytes()), latin());
        assert!(ScriptSet::of_bytes(&[0xFF, b'a']).is_subset_of(&latin()));
    }

    fn all_of(count: usize) -> SimpleVob {
        let mut mask = SimpleVob::alloc(count);
        mask.set_all(true);
        mask
    }

    #[test]
    fn issue33_a_han_token_is_masked_in_a_latin_conversation_only() {
        let han_bytes = "学".as_bytes();
        let tokens: [Option<&[u8]>; 8] = [
            Some(b" trip"),
            Some(han_bytes),
            Some(b" 42"),
            Some("数据".as_bytes()),
            Some(&han_bytes[..1]),
            None,
            Some("。".as_bytes()),
            Some(" 🙂".as_bytes()),
        ];
        let scripts = TokenScripts::new(tokens);
        // Equal sets are kept once: " trip" has Latin, "学" and "数据" Han, and " 42",
        // the control token and " 🙂" nothing; "。" its CJK scripts.
        assert_eq!(scripts.sets.len(), 4);
        assert_eq!(scripts.of(1), scripts.of(3));
        assert!(scripts.of(5).is_some_and(ScriptSet::is_empty));
        assert_eq!(scripts.of(8), None);
        let latin = ScriptFilter::new(&scripts, &ScriptSet::of_text("Help me plan a trip"));
        let mask = latin.restrict(all_of(tokens.len()));
        assert_eq!(mask.to_list(), [0, 2, 5, 7]);
        let han = ScriptFilter::new(&scripts, &ScriptSet::of_text("Help me plan a trip to 北京"));
        assert_eq!(han.len(), 0);
        assert_eq!(han.restrict(all_of(tokens.len())).num_set(), tokens.len());
        // The grammar wins: when it allows only foreign tokens, they stay allowed.
        let mut only_han = SimpleVob::alloc(tokens.len());
        only_han.allow_token(1);
        assert_eq!(latin.restrict(only_han).to_list(), [1]);
    }
}
