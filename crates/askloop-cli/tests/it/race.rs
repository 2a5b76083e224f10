//! Two `askloop resume` processes answer the same run at once: exactly one wins.

use crate::support::{ASK_THEN_ANSWER, TestDir, answered, tool_results};

#[test]
fn issue_2_concurrent_resumes_have_exactly_one_winner() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let store = dir.store_url();
    let mut conflicts = 0;
    for repetition in 0..50 {
        let run_id = dir.start_suspended(&spec);
        let mut children: Vec<_> = ["main", "docs"]
            .into_iter()
            .map(|answer| {
                let child = dir
                    .command(&["--store", &store, "resume", &run_id, "--answer", answer])
                    .spawn()
                    .unwrap();
                (answer, child)
            })
            .collect();
        let outcomes: Vec<_> = children
            .drain(..)
            .map(|(answer, child)| {
                let output = child.wait_with_output().unwrap();
                (
                    answer,
                    output.status.code(),
                    String::from_utf8(output.stderr).unwrap(),
                )
            })
            .collect();
        let winners: Vec<_> = outcomes
            .iter()
            .filter(|(_, code, _)| *code == Some(0))
            .collect();
        assert_eq!(winners.len(), 1, "repetition {repetition}: {outcomes:#?}");
        let (winner, _, _) = winners[0];
        let (_, loser_code, loser_stderr) = outcomes
            .iter()
            .find(|(_, code, _)| *code != Some(0))
            .unwrap();
        // The loser either lost the compare-and-swap (a conflict), or came after the winner
        // had already finished the run.
        if loser_stderr.contains("was applied first; this one changed nothing") {
            assert_eq!(*loser_code, Some(1), "{loser_stderr}");
            conflicts += 1;
        } else {
            assert!(
                loser_stderr.contains("not suspended"),
                "repetition {repetition}: {loser_stderr}"
            );
            assert_eq!(*loser_code, Some(2), "{loser_stderr}");
        }
        assert_eq!(loser_stderr.lines().count(), 1, "{loser_stderr}");

        // Exactly one answer was applied: the winner's.
        let state = dir.show(&run_id);
        assert_eq!(state["status"], "completed", "repetition {repetition}");
        let results = tool_results(&state);
        assert_eq!(results.len(), 1, "repetition {repetition}: {results:#?}");
        assert_eq!(results[0]["result"], answered(winner));
    }
    eprintln!("{conflicts} of 50 losers reported a conflict; the others came after the finish");
}
