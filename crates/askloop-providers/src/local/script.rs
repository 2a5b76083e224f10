//! Writing systems ([`Script`], [`ScriptSet`]) of text and of tokens, so that sampling keeps to
//! the scripts of the conversation.
//!
//! A small multilingual model drifts into another script mid-sentence (issue 33: `data科学`,
//! `other户外` in English options). [`LocalTokenizer`](crate::local::LocalTokenizer) computes
//! each token's scripts once, and the decoder masks the tokens of scripts the conversation does
//! not use ([`ScriptFilter`]), in the same step as the grammar's mask.
//!
//! Scripts come from Unicode blocks (a letter outside the blocks listed is [`Script::Other`]),
//! not from the full Unicode `Script` property: enough to tell the writing systems apart.
//! Characters of no script (digits, punctuation, symbols, emoji, whitespace, combining marks)
//! are neutral and always allowed. CJK punctuation and fullwidth forms count as
//! [`Script::CjkSymbols`], allowed whenever the conversation has Han, kana or Hangul.
//!
//! A token's bytes may end inside a character (byte-level BPE splits rare characters): such a
//! tail counts with every script its possible completions could have, sampled at the
//! granularity of its next byte; bytes continuing a character begun in an earlier token are
//! neutral (that token was checked already).

use llguidance::toktrie::SimpleVob;

/// A writing system, as a group of Unicode blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Script {
    /// Latin letters (Basic Latin, Latin-1, Latin Extended, IPA).
    Latin,
    /// Greek.
    Greek,
    /// Cyrillic.
    Cyrillic,
    /// Armenian.
    Armenian,
    /// Hebrew.
    Hebrew,
    /// Arabic.
    Arabic,
    /// Devanagari.
    Devanagari,
    /// Bengali.
    Bengali,
    /// Gurmukhi.
    Gurmukhi,
    /// Gujarati.
    Gujarati,
    /// Tamil.
    Tamil,
    /// Telugu.
    Telugu,
    /// Kannada.
    Kannada,
    /// Malayalam.
    Malayalam,
    /// Thai.
    Thai,
    /// Lao.
    Lao,
    /// Tibetan.
    Tibetan,
    /// Myanmar.
    Myanmar,
    /// Georgian.
    Georgian,
    /// Hangul.
    Hangul,
    /// Ethiopic.
    Ethiopic,
    /// Khmer.
    Khmer,
    /// Han (CJK ideographs, radicals, Bopomofo).
    Han,
    /// Hiragana and Katakana.
    Kana,
    /// CJK punctuation, enclosed and compatibility forms, fullwidth forms.
    CjkSymbols,
    /// A letter of another script.
    Other,
}

/// Blocks (first and last code point, inclusive) and their scripts, sorted; `None` marks
/// combining marks, which are neutral although some are alphabetic.
const BLOCKS: &[(u32, u32, Option<Script>)] = &[
    (0x0041, 0x005A, Some(Script::Latin)),
    (0x0061, 0x007A, Some(Script::Latin)),
    (0x00AA, 0x00AA, Some(Script::Latin)),
    (0x00BA, 0x00BA, Some(Script::Latin)),
    (0x00C0, 0x02AF, Some(Script::Latin)),
    (0x0300, 0x036F, None),
    (0x0370, 0x03FF, Some(Script::Greek)),
    (0x0400, 0x052F, Some(Script::Cyrillic)),
    (0x0530, 0x058F, Some(Script::Armenian)),
    (0x0590, 0x05FF, Some(Script::Hebrew)),
    (0x0600, 0x06FF, Some(Script::Arabic)),
    (0x0750, 0x077F, Some(Script::Arabic)),
    (0x08A0, 0x08FF, Some(Script::Arabic)),
    (0x0900, 0x097F, Some(Script::Devanagari)),
    (0x0980, 0x09FF, Some(Script::Bengali)),
    (0x0A00, 0x0A7F, Some(Script::Gurmukhi)),
    (0x0A80, 0x0AFF, Some(Script::Gujarati)),
    (0x0B80, 0x0BFF, Some(Script::Tamil)),
    (0x0C00, 0x0C7F, Some(Script::Telugu)),
    (0x0C80, 0x0CFF, Some(Script::Kannada)),
    (0x0D00, 0x0D7F, Some(Script::Malayalam)),
    (0x0E00, 0x0E7F, Some(Script::Thai)),
    (0x0E80, 0x0EFF, Some(Script::Lao)),
    (0x0F00, 0x0FFF, Some(Script::Tibetan)),
    (0x1000, 0x109F, Some(Script::Myanmar)),
    (0x10A0, 0x10FF, Some(Script::Georgian)),
    (0x1100, 0x11FF, Some(Script::Hangul)),
    (0x1200, 0x139F, Some(Script::Ethiopic)),
    (0x1780, 0x17FF, Some(Script::Khmer)),
    (0x1AB0, 0x1AFF, None),
    (0x1C80, 0x1C8F, Some(Script::Cyrillic)),
    (0x1C90, 0x1CBF, Some(Script::Georgian)),
    (0x1D00, 0x1DBF, Some(Script::Latin)),
    (0x1DC0, 0x1DFF, None),
    (0x1E00, 0x1EFF, Some(Script::Latin)),
    (0x1F00, 0x1FFF, Some(Script::Greek)),
    (0x20D0, 0x20FF, None),
    (0x2C60, 0x2C7F, Some(Script::Latin)),
    (0x2D00, 0x2D2F, Some(Script::Georgian)),
    (0x2DE0, 0x2DFF, Some(Script::Cyrillic)),
    (0x2E80, 0x2FDF, Some(Script::Han)),
    (0x3000, 0x3004, Some(Script::CjkSymbols)),
    (0x3005, 0x3007, Some(Script::Han)),
    (0x3008, 0x3020, Some(Script::CjkSymbols)),
    (0x3021, 0x3029, Some(Script::Han)),
    (0x302A, 0x303F, Some(Script::CjkSymbols)),
    (0x3040, 0x30FF, Some(Script::Kana)),
    (0x3100, 0x312F, Some(Script::Han)),
    (0x3130, 0x318F, Some(Script::Hangul)),
    (0x3190, 0x319F, Some(Script::CjkSymbols)),
    (0x31A0, 0x31BF, Some(Script::Han)),
    (0x31C0, 0x31EF, Some(Script::CjkSymbols)),
    (0x31F0, 0x31FF, Some(Script::Kana)),
    (0x3200, 0x33FF, Some(Script::CjkSymbols)),
    (0x3400, 0x4DBF, Some(Script::Han)),
    (0x4E00, 0x9FFF, Some(Script::Han)),
    (0xA640, 0xA69F, Some(Script::Cyrillic)),
    (0xA720, 0xA7FF, Some(Script::Latin)),
    (0xA960, 0xA97F, Some(Script::Hangul)),
    (0xAB30, 0xAB6F, Some(Script::Latin)),
    (0xAC00, 0xD7FF, Some(Script::Hangul)),
    (0xF900, 0xFAFF, Some(Script::Han)),
    (0xFB00, 0xFB06, Some(Script::Latin)),
    (0xFB1D, 0xFB4F, Some(Script::Hebrew)),
    (0xFB50, 0xFDFF, Some(Script::Arabic)),
    (0xFE20, 0xFE2F, None),
    (0xFE30, 0xFE4F, Some(Script::CjkSymbols)),
    (0xFE70, 0xFEFF, Some(Script::Arabic)),
    (0xFF00, 0xFF65, Some(Script::CjkSymbols)),
    (0xFF66, 0xFF9F, Some(Script::Kana)),
    (0xFFA0, 0xFFDC, Some(Script::Hangul)),
    (0xFFE0, 0xFFEF, Some(Script::CjkSymbols)),
    (0x20000, 0x3FFFF, Some(Script::Han)),
];

impl Script {
    /// The script of a code point; `None` for a neutral one (see the module docs) or a number
    /// that is no character.
    pub fn of_code_point(code_point: u32) -> Option<Self> {
        let index = BLOCKS.partition_point(|(_, last, _)| *last < code_point);
        if let Some((first, _, script)) = BLOCKS.get(index)
            && *first <= code_point
        {
            return *script;
        }
        char::from_u32(code_point)
            .filter(|character| character.is_alphabetic())
            .map(|_| Self::Other)
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// A set of [`Script`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptSet(u32);

impl ScriptSet {
    /// The scripts of the characters of `text`.
    pub fn of_text(text: &str) -> Self {
        text.chars()
            .filter_map(|character| Script::of_code_point(u32::from(character)))
            .fold(Self::default(), Self::with)
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
                Ok(text) => return scripts.union(Self::of_text(text)),
                Err(error) => {
                    let (valid, tail) = rest.split_at(error.valid_up_to());
                    scripts = scripts.union(Self::of_text(
                        std::str::from_utf8(valid).unwrap_or_default(),
                    ));
                    match error.error_len() {
                        // A character cut at the end of the token.
                        None => return scripts.union(Self::of_partial(tail)),
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
        (0..64u32)
            .map(|next| (((known << 6) | next) << (6 * (missing - 1))) + step / 2)
            .chain((0..64u32).map(|next| ((known << 6) | next) << (6 * (missing - 1))))
            .filter_map(Script::of_code_point)
            .fold(Self::default(), Self::with)
    }

    /// This set with `script`.
    pub fn with(self, script: Script) -> Self {
        let mut set = Self(self.0 | script.bit());
        if [Script::Han, Script::Kana, Script::Hangul].contains(&script) {
            set.0 |= Script::CjkSymbols.bit();
        }
        set
    }

    /// Both sets' scripts.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every script of this set is in `other`.
    pub fn is_subset_of(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }

    /// Whether the set is empty (neutral text).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set has `script`.
    pub fn contains(self, script: Script) -> bool {
        self.0 & script.bit() != 0
    }
}

/// The tokens a request may not sample: those of a script its conversation does not use.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScriptFilter {
    foreign: Vec<u32>,
}

impl ScriptFilter {
    /// The filter for a conversation written in `allowed`, over tokens of `token_scripts`.
    pub(crate) fn new(token_scripts: &[ScriptSet], allowed: ScriptSet) -> Self {
        let foreign = token_scripts
            .iter()
            .enumerate()
            .filter(|(_, scripts)| !scripts.is_subset_of(allowed))
            .map(|(token, _)| token as u32)
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

    #[test]
    fn text_scripts_leave_digits_punctuation_and_emoji_neutral() {
        assert_eq!(
            ScriptSet::of_text("Lisbon, 3 days!"),
            ScriptSet::default().with(Script::Latin)
        );
        assert!(ScriptSet::of_text("42 — “…” 🙂 \n\t").is_empty());
        assert!(ScriptSet::of_text("café naïve").is_subset_of(ScriptSet::of_text("a")));
        let mixed = ScriptSet::of_text("data科学");
        assert!(mixed.contains(Script::Han) && mixed.contains(Script::Latin));
        assert!(ScriptSet::of_text("Привет").contains(Script::Cyrillic));
        assert!(ScriptSet::of_text("カタカナ").contains(Script::Kana));
        assert!(ScriptSet::of_text("。").is_subset_of(ScriptSet::of_text("中")));
        assert!(!ScriptSet::of_text("。").is_subset_of(ScriptSet::of_text("a")));
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
            ScriptSet::default()
                .with(Script::Latin)
                .with(Script::Cyrillic)
        );
        // "“" is E2 80 9C: the two bytes E2 80 start only punctuation.
        assert!(ScriptSet::of_bytes(&"“".as_bytes()[..2]).is_empty());
        assert_eq!(
            ScriptSet::of_bytes(" é".as_bytes()),
            ScriptSet::default().with(Script::Latin)
        );
    }

    fn all_of(count: usize) -> SimpleVob {
        let mut mask = SimpleVob::alloc(count);
        mask.set_all(true);
        mask
    }

    #[test]
    fn issue33_a_han_token_is_masked_in_a_latin_conversation_only() {
        let han_bytes = "学".as_bytes();
        let tokens: Vec<ScriptSet> = [
            b" trip".as_slice(),
            han_bytes,
            b" 42",
            "数据".as_bytes(),
            &han_bytes[..1],
        ]
        .iter()
        .map(|token| ScriptSet::of_bytes(token))
        .collect();
        let latin = ScriptFilter::new(&tokens, ScriptSet::of_text("Help me plan a trip"));
        let mask = latin.restrict(all_of(tokens.len()));
        assert_eq!(mask.to_list(), [0, 2]);
        let han = ScriptFilter::new(&tokens, ScriptSet::of_text("Help me plan a trip to 北京"));
        assert_eq!(han.restrict(all_of(tokens.len())).num_set(), tokens.len());
        // The grammar wins: when it allows only foreign tokens, they stay allowed.
        let mut only_han = SimpleVob::alloc(tokens.len());
        only_han.allow_token(1);
        assert_eq!(latin.restrict(only_han).to_list(), [1]);
    }
}
