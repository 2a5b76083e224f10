//! Text checks shared by the core: what counts as blank.

/// Whether `text` shows nothing (the rule every blank check of askloop uses): every character is whitespace, a control character (NUL, ESC,
/// …) or an invisible format character (zero-width space and joiners, word joiner, byte order
/// mark, soft hyphen, directional marks and isolates, variation selectors, tag characters, Hangul
/// fillers). A question or a free-text answer must not be blank.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|character| {
        character.is_whitespace() || character.is_control() || is_invisible(character)
    })
}

/// The invisible characters of Unicode's format category (Cf) and their look-alikes.
pub(crate) fn is_invisible(character: char) -> bool {
    matches!(
        character,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Nearly the same rule as a JSON Schema `pattern` (ECMAScript with the `u` flag, and the Rust
/// regex dialect of the validator): at least one character that is not whitespace, control or
/// format (Cf). [`is_blank`] is the authoritative check; it also refuses the few invisible
/// characters outside those classes.
pub(crate) const NON_BLANK_PATTERN: &str = "[^\\s\\p{Cc}\\p{Cf}]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_text_is_blank() {
        for blank in [
            "",
            " ",
            "\t\n",
            "\u{0}",
            "\u{1b}",
            "\u{200B}",
            "\u{FEFF}\u{2060}",
            "\u{3164}",
        ] {
            assert!(is_blank(blank), "{blank:?}");
        }
        for visible in ["a", " x ", "\u{0}1", "é", "🙂", "\u{200B}no"] {
            assert!(!is_blank(visible), "{visible:?}");
        }
    }
}
