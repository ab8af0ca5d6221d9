// Tokenization with llama.cpp (node-llama-cpp): kiln's tests compare a GGUF's vocabulary as
// llama.cpp reads it with kiln's reading of it.
//   node tokenize.mjs MODEL.gguf TEXTS.json   ->  {"ids": [[...], ...]} on stdout
// TEXTS.json is a JSON array of strings; special-token strings in them are plain text.
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model_path, texts_path] = process.argv.slice(2);
if (!model_path || !texts_path) {
  console.error("usage: node tokenize.mjs MODEL.gguf TEXTS.json");
  process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path, vocabOnly: true});
const texts = JSON.parse(readFileSync(texts_path, "utf8"));
const ids = texts.map((t) => Array.from(model.tokenize(t, false)));
console.log(JSON.stringify({ids}));
await model.dispose();
