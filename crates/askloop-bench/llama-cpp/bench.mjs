// llama.cpp on the same prompt, for comparison with `askloop-bench local`: prefill tokens/s for
// the prompt text `askloop-bench local --prompt-out PROMPT.txt` wrote (the built-in agent's
// first step), and decode tokens/s for 128 tokens of free text, with 2 threads, CPU only. Prints
// one JSON line.
//
//     npm install node-llama-cpp@3.22.1      (prebuilt llama.cpp; in a scratch folder)
//     node bench.mjs MODEL.gguf PROMPT.txt   (run from that folder)
import { readFileSync } from "node:fs";
import { getLlama } from "node-llama-cpp";

const [modelPath, promptPath] = process.argv.slice(2);
const threads = Number(process.env.THREADS ?? 2);
const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 2048, threads, batchSize: 512 });
const prompt = model.tokenize(readFileSync(promptPath, "utf8"), true);

let sequence = context.getSequence();
let started = performance.now();
await sequence.evaluateWithoutGeneratingNewTokens(prompt);
const prefillMs = performance.now() - started;
sequence.dispose();

sequence = context.getSequence();
const story = model.tokenize(
  "<|im_start|>user\nWrite a long story about a dragon who learns to fly.<|im_end|>\n<|im_start|>assistant\n",
  true,
);
let first = 0;
let count = 0;
for await (const token of sequence.evaluate(story, { temperature: 0 })) {
  count += 1;
  if (count === 1) first = performance.now();
  if (count === 128) break;
}
const decodeMs = performance.now() - first;
console.log(
  JSON.stringify({
    engine: "llama.cpp (node-llama-cpp 3.22.1)",
    threads,
    prompt_tokens: prompt.length,
    prefill_ms: Math.round(prefillMs),
    prefill_tokens_per_s: Math.round((prompt.length / prefillMs) * 10000) / 10,
    decode_tokens: count,
    decode_tokens_per_s: Math.round(((count - 1) / decodeMs) * 10000) / 10,
  }),
);
process.exit(0);
