// llama.cpp's speed on a GGUF (node-llama-cpp, CPU build), for bench/model/vs_llama_cpp.py:
//   node bench.mjs MODEL.gguf PROMPT DECODE THREADS  ->  {"prefill_tps": x, "decode_tps": y} on stdout
// Prefill: a PROMPT-token prompt evaluated up to its first generated token (after an untimed warm-up
// prompt); decode: the DECODE tokens after it, one per step at temperature 0, as 1 / the mean step.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model_path, prompt_arg, decode_arg, threads_arg] = process.argv.slice(2);
const prompt_len = Number(prompt_arg), decode = Number(decode_arg), threads = Number(threads_arg);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path});
const context = await model.createContext({contextSize: prompt_len + decode + 16, batchSize: Math.max(512, prompt_len),
                                           threads});
const prompt = Array.from({length: prompt_len}, (_, i) => 259 + (i * 7919) % 200);  // past specials and bytes

async function run(n_decode) {
  const sequence = context.getSequence();
  const t0 = performance.now();
  let t_first = 0, got = 0;
  for await (const _ of sequence.evaluate(prompt, {temperature: 0})) {
    if (got++ === 0) t_first = performance.now();
    if (got > n_decode) break;
  }
  const t_end = performance.now();
  sequence.dispose();
  return {prefill_tps: prompt_len / ((t_first - t0) / 1000), decode_tps: n_decode / ((t_end - t_first) / 1000)};
}

await run(2);  // warm-up
console.log(JSON.stringify(await run(decode)));
await context.dispose();
await model.dispose();
