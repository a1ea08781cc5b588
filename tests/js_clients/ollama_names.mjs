// Drives the official `ollama` JavaScript client against a gateway and prints
// what each call returned as one JSON object on stdout (the Python test
// tests/e2e/test_ollama_js_client.py judges it). A call that throws is
// reported as {"status": <HTTP status>, "error": <message>}.
//
// Environment: MLXD_URL (the gateway), MLXD_KEY (its API key), MLXD_CHAT
// (an untagged chat model), MLXD_TAGGED (an alias with a tag), MLXD_EMBED
// (an untagged embedding model).
import { Ollama } from "ollama";

const env = process.env;
const client = new Ollama({ host: env.MLXD_URL, headers: { Authorization: `Bearer ${env.MLXD_KEY}` } });
const chatName = `${env.MLXD_CHAT}:latest`;
const embedName = `${env.MLXD_EMBED}:latest`;
const ask = [{ role: "user", content: "Say something." }];
const few = { num_predict: 2 };

async function outcome(call) {
  try {
    return await call();
  } catch (error) {
    return { status: error.status_code ?? null, error: error.error ?? String(error) };
  }
}

async function streamed(request) {
  const parts = [];
  for await (const part of await client.chat({ ...request, stream: true })) parts.push(part);
  return { parts: parts.length, model: parts.at(-1).model, done: parts.at(-1).done };
}

const report = {};
report.list = (await client.list()).models.map((m) => ({ name: m.name, model: m.model }));
report.chat = await outcome(() => client.chat({ model: chatName, messages: ask, options: few }));
report.chat_stream = await outcome(() => streamed({ model: chatName, messages: ask, options: few }));
report.chat_tagged = await outcome(() => client.chat({ model: env.MLXD_TAGGED, messages: ask, options: few }));
report.generate = await outcome(() => client.generate({ model: chatName, prompt: "Hi", options: few }));
report.embed = await outcome(() => client.embed({ model: embedName, input: ["a cat", "a dog"] }));
report.show = await outcome(() => client.show({ model: chatName }));
report.show_untagged = await outcome(() => client.show({ model: env.MLXD_CHAT }));
report.ps = (await client.ps()).models.map((m) => ({ name: m.name, model: m.model }));
report.listed_shows = {};
for (const { model } of report.list) {
  report.listed_shows[model] = await outcome(async () => (await client.show({ model })).capabilities);
}
report.other_tag = await outcome(() => client.chat({ model: `${env.MLXD_CHAT}:4b`, messages: ask }));
report.think_true = await outcome(() => client.chat({ model: chatName, messages: ask, think: true, options: few }));
report.think_level = await outcome(() =>
  client.generate({ model: env.MLXD_CHAT, prompt: "Hi", think: "high", options: few }),
);
report.think_false = await outcome(() => client.chat({ model: chatName, messages: ask, think: false, options: few }));
console.log(JSON.stringify(report));
