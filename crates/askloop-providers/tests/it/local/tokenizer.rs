//! The tokenizer built from the GGUF metadata against reference ids from independent
//! implementations: Hugging Face `tokenizers` for SmolLM2-135M (fixture made by
//! `fixtures/local/make_tokenizer_fixture.py`), llama.cpp for Qwen2.5 (fixture made by
//! `fixtures/local/make_qwen_tokenizer_fixture.mjs`, on the same texts).

use serde::Deserialize;

use askloop_providers::local::{LocalTokenizer, PreTokenizer};

use crate::local::support::{model, qwen};

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

#[test]
fn tokenizer_matches_the_reference_ids() {
    let model = model();
    assert_eq!(model.tokenizer().pre_tokenizer(), PreTokenizer::SmolLm);
    matches_reference(
        model.tokenizer(),
        include_str!("../fixtures/local/tokenizer_reference.json"),
    );
}

#[test]
fn issue8_qwen_tokenizer_matches_llama_cpp() {
    let model = qwen();
    assert_eq!(model.tokenizer().pre_tokenizer(), PreTokenizer::Qwen2);
    matches_reference(
        model.tokenizer(),
        include_str!("../fixtures/local/qwen_tokenizer_reference.json"),
    );
}

#[test]
fn issue8_qwen_special_and_added_tokens_match_whole() {
    let model = qwen();
    let tokenizer = model.tokenizer();
    let im_start = tokenizer.token_id("<|im_start|>").unwrap();
    let im_end = tokenizer.token_id("<|im_end|>").unwrap();
    let open = tokenizer.token_id("<tool_call>").unwrap();
    let close = tokenizer.token_id("</tool_call>").unwrap();
    assert_eq!(tokenizer.end_of_turn(), im_end);
    let ids = tokenizer.encode("<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>");
    assert_eq!(ids.first(), Some(&im_start));
    assert!(ids.contains(&open) && ids.contains(&close), "{ids:?}");
    assert_eq!(ids.last(), Some(&im_end));
    // Control tokens are special (masked in plain text); `<tool_call>` is not.
    assert!(tokenizer.is_special(im_end));
    assert!(!tokenizer.is_special(open));
    assert_eq!(tokenizer.decode(&[open]), "<tool_call>");
}

fn matches_reference(tokenizer: &LocalTokenizer, fixture: &str) {
    let cases: Vec<Case> = serde_json::from_str(fixture).unwrap();
    assert!(cases.len() >= 500, "{} cases", cases.len());
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
