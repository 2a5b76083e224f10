//! [`Sampler`]: picks the next token from logits with temperature, top-p and a seeded generator.
//!
//! The generator is SplitMix64, written out here so a seed gives the same tokens on every
//! platform and with every version of the dependencies.

/// How much a token that was sampled recently is discouraged (llama.cpp's `repeat_penalty`).
pub(crate) const REPEAT_PENALTY: f32 = 1.2;
/// How many recently sampled tokens the penalty looks at.
pub(crate) const REPEAT_WINDOW: usize = 64;

/// Sampling settings and the random state of one generation.
#[derive(Clone, Debug)]
pub(crate) struct Sampler {
    temperature: f32,
    top_p: f32,
    state: u64,
    recent: std::collections::VecDeque<u32>,
}

impl Sampler {
    /// A sampler; a temperature of 0 or less picks the most likely token.
    pub(crate) fn new(temperature: f32, top_p: f32, seed: u64) -> Self {
        Self {
            temperature,
            top_p: if top_p > 0.0 && top_p <= 1.0 {
                top_p
            } else {
                1.0
            },
            state: seed,
            recent: std::collections::VecDeque::with_capacity(REPEAT_WINDOW),
        }
    }

    /// Discourages the tokens sampled in the last [`REPEAT_WINDOW`] steps: a 135M model
    /// otherwise repeats itself (the same option label four times).
    fn penalize_repeats(&self, logits: &mut [f32]) {
        for token in &self.recent {
            if let Some(logit) = logits.get_mut(*token as usize) {
                if *logit > 0.0 {
                    *logit /= REPEAT_PENALTY;
                } else {
                    *logit *= REPEAT_PENALTY;
                }
            }
        }
    }

    fn remember(&mut self, token: u32) {
        if self.recent.contains(&token) {
            return;
        }
        if self.recent.len() == REPEAT_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in [0, 1).
    fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Picks a token among those with a finite logit; `None` if there is none.
    pub(crate) fn sample(&mut self, logits: &mut [f32]) -> Option<u32> {
        self.penalize_repeats(logits);
        let token = self.pick(logits)?;
        self.remember(token);
        Some(token)
    }

    fn pick(&mut self, logits: &[f32]) -> Option<u32> {
        let (best, max) = logits
            .iter()
            .enumerate()
            .filter(|(_, logit)| logit.is_finite())
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(index, logit)| (index as u32, *logit))?;
        if self.temperature <= 0.0 {
            return Some(best);
        }
        // Candidates within a factor 1e-6 of the best token's probability; the rest cannot
        // change a top-p choice measurably and would only slow the sort.
        let floor = max - self.temperature * 13.8;
        let mut candidates: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .filter(|(_, logit)| logit.is_finite() && **logit >= floor)
            .map(|(index, logit)| {
                (
                    index as u32,
                    f64::from((logit - max) / self.temperature).exp(),
                )
            })
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let total: f64 = candidates.iter().map(|(_, weight)| weight).sum();
        let mut kept = 0.0;
        let mut cut = candidates.len();
        for (index, (_, weight)) in candidates.iter().enumerate() {
            kept += weight;
            if kept / total >= f64::from(self.top_p) {
                cut = index + 1;
                break;
            }
        }
        candidates.truncate(cut);
        let mut target = self.next_unit() * kept;
        for (token, weight) in &candidates {
            if target < *weight {
                return Some(*token);
            }
            target -= weight;
        }
        candidates.last().map(|(token, _)| *token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_temperature_is_greedy_and_masked_tokens_are_never_picked() {
        let mut logits = [1.0, 3.0, f32::NEG_INFINITY, 2.0];
        assert_eq!(
            Sampler::new(0.0, 1.0, 1).sample(&mut logits.clone()),
            Some(1)
        );
        let mut sampler = Sampler::new(1.0, 1.0, 7);
        for _ in 0..200 {
            assert_ne!(sampler.sample(&mut logits), Some(2));
        }
        assert_eq!(sampler.sample(&mut [f32::NEG_INFINITY]), None);
    }

    #[test]
    fn a_seed_repeats_and_top_p_cuts_the_tail() {
        let logits: Vec<f32> = (0..50).map(|index| index as f32 / 10.0).collect();
        let run = |seed| {
            let mut sampler = Sampler::new(0.8, 0.9, seed);
            (0..20)
                .map(|_| sampler.sample(&mut logits.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
        for seed in 0..50 {
            let mut sampler = Sampler::new(1.0, 0.01, seed);
            assert_eq!(sampler.sample(&mut logits.clone()), Some(49));
        }
    }

    #[test]
    fn a_token_sampled_recently_is_discouraged() {
        let mut sampler = Sampler::new(0.0, 1.0, 1);
        let logits = [2.0, 1.9, 0.0];
        assert_eq!(sampler.sample(&mut logits.clone()), Some(0));
        // 2.0 / 1.2 < 1.9: the greedy pick moves on.
        assert_eq!(sampler.sample(&mut logits.clone()), Some(1));
    }
}
