// openai-check.mjs sends requests through a pdroute listener with the official OpenAI SDK
// for Node and checks that the SDK parses every answer: what a user's application sees.
//
//   node openai-check.mjs --base http://127.0.0.1:PORT/v1 [--max-body BYTES]
//                         [--long-chat-route ROUTE] [--short-route ROUTE]
//
// --max-body is the plugin's max_body_bytes (the oversized request is larger); --long-chat-route
// is the x-pdroute-path a long chat completion must take (disagg; direct for lmcache on the
// headers way); --short-route the one of a short prompt (direct; disagg for sglang, whose PD
// decoders refuse a request without a prefill's room: threshold_tokens 0). The stack must set debug_headers (x-pdroute-path). Prints one summary line
// (disagg=N direct=N: the decodes the engines should have recorded); exits 1 on any failure.
// e2e/scenarios TestOpenAISDK runs it in every mode and both ways.
import OpenAI from 'openai';
import { VERSION } from 'openai/version';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    base: { type: 'string' },
    'max-body': { type: 'string', default: String(256 << 10) },
    'long-chat-route': { type: 'string', default: 'disagg' },
    'short-route': { type: 'string', default: 'direct' },
  },
});
if (!args.base) {
  console.error('usage: node openai-check.mjs --base http://HOST:PORT/v1 [--max-body BYTES] [--long-chat-route ROUTE] [--short-route ROUTE]');
  process.exit(2);
}

// No retries: a 5xx must fail the check, not be hidden by a second try.
const client = new OpenAI({ baseURL: args.base, apiKey: 'sk-pdroute-check', maxRetries: 0, timeout: 30_000 });
const model = 'mock-model';

const words = 'the quick brown fox jumps over a lazy dog while seven curious otters debate quantum harmonics beneath an amber lighthouse near granite cliffs where violet moths gather every autumn evening to hum forgotten melodies'.split(' ');
// text returns about n characters of filler; seed makes prompts distinct (threshold_on
// "uncached" would serve a repeat from the decoder's cache).
function text(n, seed) {
  let s = `request ${seed}:`;
  for (let i = seed; s.length < n; i++) s += ' ' + words[i % words.length];
  return s.slice(0, n);
}
const shortPrompt = 'Say hello in one word.';
const longPrompt = (seed) => text(2400, seed); // about 500 tokens, over the stacks' threshold (256)

const failures = [];
const counts = { requests: 0, disagg: 0, direct: 0, errors: 0 };

function check(cond, what, detail) {
  if (!cond) failures.push(`${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  return cond;
}

// route checks the debug header and counts the decode the engines should record.
function route(name, response, want) {
  const got = response.headers.get('x-pdroute-path');
  check(got === want, `${name}: x-pdroute-path`, { got, want });
  if (got === 'disagg' || got === 'direct') counts[got]++;
}

function checkUsage(name, usage) {
  check(usage && usage.prompt_tokens > 0 && usage.completion_tokens > 0 &&
    usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, `${name}: usage`, usage);
}

async function step(name, fn) {
  counts.requests++;
  try {
    await fn();
  } catch (err) {
    failures.push(`${name}: ${err?.constructor?.name ?? 'error'} ${err?.status ?? ''} ${err?.message ?? err}`);
  }
}

async function chat(name, prompt, want, extra = {}) {
  await step(name, async () => {
    const { data, response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 8, ...extra })
      .withResponse();
    route(name, response, want);
    check(data.object === 'chat.completion', `${name}: object`, data.object);
    const c = data.choices?.[0];
    check(c?.message?.role === 'assistant' && typeof c.message.content === 'string' && c.message.content.length > 0,
      `${name}: message`, c?.message);
    check(c?.finish_reason === 'length' || c?.finish_reason === 'stop', `${name}: finish_reason`, c?.finish_reason);
    checkUsage(name, data.usage);
  });
}

async function chatStream(name, prompt, want) {
  await step(name, async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 8, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    route(name, response, want);
    let content = '', finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      check(chunk.object === 'chat.completion.chunk', `${name}: chunk object`, chunk.object);
      for (const c of chunk.choices ?? []) {
        content += c.delta?.content ?? '';
        finish = c.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    check(chunks > 1, `${name}: chunks`, chunks);
    check(content.length > 0, `${name}: streamed content`, content);
    check(finish === 'length' || finish === 'stop', `${name}: finish_reason`, finish);
    checkUsage(name, usage);
  });
}

async function completion(name, prompt, want, stream = false) {
  await step(name, async () => {
    const { data, response } = await client.completions
      .create({ model, prompt, max_tokens: 8, ...(stream && { stream: true, stream_options: { include_usage: true } }) })
      .withResponse();
    route(name, response, want);
    let textOut = '', finish = null, usage = null;
    if (stream) {
      for await (const chunk of data) {
        check(chunk.object === 'text_completion', `${name}: chunk object`, chunk.object);
        for (const c of chunk.choices ?? []) {
          textOut += c.text ?? '';
          finish = c.finish_reason ?? finish;
        }
        if (chunk.usage) usage = chunk.usage;
      }
    } else {
      check(data.object === 'text_completion', `${name}: object`, data.object);
      textOut = data.choices?.[0]?.text ?? '';
      finish = data.choices?.[0]?.finish_reason;
      usage = data.usage;
    }
    check(textOut.length > 0, `${name}: text`, textOut);
    check(finish === 'length' || finish === 'stop', `${name}: finish_reason`, finish);
    checkUsage(name, usage);
  });
}

// refused expects the SDK to throw its APIError with this status and pdroute's error code.
async function refused(name, status, code, send) {
  await step(name, async () => {
    try {
      await send();
      failures.push(`${name}: no error, want ${status}`);
    } catch (err) {
      if (!check(err instanceof OpenAI.APIError, `${name}: not an APIError`, String(err))) return;
      check(err.status === status, `${name}: status`, { got: err.status, want: status, error: err.error });
      check(err.code === code, `${name}: error.code`, { got: err.code, want: code, error: err.error });
      check(typeof err.error?.message === 'string' && err.error.message.length > 0, `${name}: error.message`, err.error);
      if (status === 400) check(err instanceof OpenAI.BadRequestError, `${name}: not a BadRequestError`, err.constructor.name);
      counts.errors++;
    }
  });
}

const started = Date.now();
let seed = 0;
await chat('chat short', shortPrompt, args['short-route']);
await chat('chat long', longPrompt(++seed), args['long-chat-route']);
// Control fields a client must not be able to set: pdroute drops them (the engines' records
// are checked by the Go test: the KV still comes from the prefill pdroute chose).
await chat('chat long with client control fields', longPrompt(++seed), args['long-chat-route'], {
  kv_transfer_params: { do_remote_prefill: true, remote_engine_id: 'evil', remote_host: '10.9.9.9', remote_port: 1 },
  bootstrap_host: '10.9.9.9', bootstrap_port: 1, bootstrap_room: 42,
});
await chatStream('chat short streamed', shortPrompt, args['short-route']);
await chatStream('chat long streamed', longPrompt(++seed), args['long-chat-route']);
await completion('completion short', shortPrompt, args['short-route']);
await completion('completion long', longPrompt(++seed), 'disagg');
await completion('completion long streamed', longPrompt(++seed), 'disagg', true);
await refused('malformed JSON', 400, 'INVALID_JSON', () =>
  client.post('/chat/completions', { body: '{"model": "mock-model", "messages": [', headers: { 'content-type': 'application/json' } }));
await refused('oversized body', 413, 'REQUEST_TOO_LARGE', () =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content: text(Number(args['max-body']) + 4096, 0) }] }));

const summary = `openai@${VERSION} ${args.base}: ${counts.requests} requests, disagg=${counts.disagg} direct=${counts.direct} errors=${counts.errors}, ${Date.now() - started} ms`;
if (failures.length) {
  for (const f of failures) console.log('FAIL ' + f);
  console.log(`FAIL ${summary}: ${failures.length} failures`);
  process.exit(1);
}
console.log(`ok ${summary}`);
