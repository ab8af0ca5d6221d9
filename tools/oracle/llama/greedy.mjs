// Greedy decoding with llama.cpp (node-llama-cpp, CPU): kiln's tests compare kiln's ids with these.
//   node greedy.mjs MODEL.gguf PROMPT_IDS N   ->  {"ids": [...]} on stdout
// PROMPT_IDS is comma-separated; N tokens are generated one step at a time at temperature 0.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model_path, prompt_arg, n_arg] = process.argv.slice(2);
if (!model_path || !prompt_arg || !n_arg) {
  console.error("usage: node greedy.mjs MODEL.gguf PROMPT_IDS N");
  process.exit(2);
}
const prompt = prompt_arg.split(",").map(Number);
const n = Number(n_arg);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path});
// One thread: the answer does not depend on it, and spinning threads on a busy 2-core machine made a
// 40-token stories260K run take 42 s instead of 0.04 s.
const context = await model.createContext({contextSize: Math.max(64, prompt.length + n + 8), batchSize: 512, threads: 1});
const sequence = context.getSequence();
const ids = [];
for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
  ids.push(token);
  if (ids.length >= n) break;
}
console.log(JSON.stringify({ids}));
await context.dispose();
await model.dispose();
