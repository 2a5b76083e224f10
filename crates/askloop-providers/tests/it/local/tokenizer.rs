//! The tokenizer built from the GGUF metadata against reference ids from Hugging Face
//! `tokenizers` (fixture made by `fixtures/local/make_tokenizer_fixture.py`).

use serde::Deserialize;

use crate::local::support::model;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

#[test]
fn tokenizer_matches_the_reference_ids() {
    let cases: Vec<Case> =
        serde_json::from_str(include_str!("../fixtures/local/tokenizer_reference.json")).unwrap();
    assert!(cases.len() >= 500, "{} cases", cases.len());
    let model = model();
    let tokenizer = model.tokenizer();
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let ids = tokenizer.encode(&case.text);
            (ids != case.ids)
                .then(|| format!("{:?}: got {ids:?}, expected {:?}", case.text, case.ids))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} strings differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
    for case in &cases {
        assert_eq!(tokenizer.decode(&case.ids), case.text);
    }
}

#[test]
fn control_tokens_are_special_and_end_of_turn_is_im_end() {
    let model = model();
    let tokenizer = model.tokenizer();
    assert_eq!(tokenizer.end_of_turn(), 2);
    assert_eq!(tokenizer.token_id("<|im_end|>"), Some(2));
    assert_eq!(tokenizer.encode("<|im_start|>user\nHi<|im_end|>")[0], 1);
    assert!(tokenizer.is_special(2));
    assert!(!tokenizer.is_special(100));
    assert_eq!(tokenizer.vocab_size(), 49152);
}
