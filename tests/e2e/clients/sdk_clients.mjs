// The official client libraries against the router, unchanged: the
// `openai` package's Responses API (create, continue with
// previous_response_id, stream, retrieve) and the `@anthropic-ai/sdk`
// package's Messages API (create, stream, countTokens, an error). Run by
// tests/e2e/test_sdk_clients.c as: node sdk_clients.mjs BASE_URL MODEL.
// Prints "ok" and exits 0, or prints what differed and exits 1.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, model] = process.argv.slice(2);
const fail = (what, v) => {
  console.error(`FAIL: ${what}: ${JSON.stringify(v)}`);
  process.exit(1);
};

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-test', maxRetries: 0 });
const r1 = await openai.responses.create({ model, input: 'hello', max_output_tokens: 3 });
if (r1.object !== 'response' || !r1.id.startsWith('resp_')) fail('responses.create', r1);
if (typeof r1.output_text !== 'string' || r1.output_text.length === 0) fail('output_text', r1);
const r2 = await openai.responses.create({
  model, input: 'again', previous_response_id: r1.id, max_output_tokens: 2,
});
if (r2.previous_response_id !== r1.id) fail('previous_response_id', r2);

const stream = await openai.responses.create({
  model, input: 'a stream', previous_response_id: r2.id, stream: true, max_output_tokens: 3,
});
const types = [];
let text = '';
let completed = null;
for await (const ev of stream) {
  types.push(ev.type);
  if (ev.type === 'response.output_text.delta') text += ev.delta;
  if (ev.type === 'response.completed') completed = ev.response;
}
if (types[0] !== 'response.created' || completed === null) fail('stream events', types);
if (completed.output[0].content[0].text !== text || text.length === 0) fail('stream text', text);
const got = await openai.responses.retrieve(completed.id);
if (got.id !== completed.id) fail('responses.retrieve', got);
try {
  await openai.responses.create({ model, input: 'x', previous_response_id: 'resp_unknown' });
  fail('unknown previous_response_id', 'no error');
} catch (e) {
  if (e.status !== 404) fail('unknown previous_response_id status', e.status);
}

const anthropic = new Anthropic({ baseURL: base, apiKey: 'sk-test', maxRetries: 0 });
const msgs = [{ role: 'user', content: 'hi' }];
const m = await anthropic.messages.create({ model, max_tokens: 3, system: 'brief', messages: msgs });
if (m.type !== 'message' || m.content[0].type !== 'text' || m.usage.output_tokens !== 3)
  fail('messages.create', m);
const ms = await anthropic.messages.create({ model, max_tokens: 2, messages: msgs, stream: true });
const mtypes = [];
let mtext = '';
for await (const ev of ms) {
  mtypes.push(ev.type);
  if (ev.type === 'content_block_delta') mtext += ev.delta.text;
}
if (mtypes[0] !== 'message_start' || mtypes[mtypes.length - 1] !== 'message_stop' || !mtext)
  fail('messages stream', mtypes);
const ct = await anthropic.messages.countTokens({ model, messages: msgs });
if (typeof ct.input_tokens !== 'number' || ct.input_tokens < 1) fail('countTokens', ct);
try {
  await anthropic.messages.create({ model: 'no-such-model', max_tokens: 1, messages: msgs });
  fail('unknown model', 'no error');
} catch (e) {
  if (e.status !== 404 || e.error?.error?.type !== 'not_found_error') fail('anthropic 404', e.error);
}
console.log('ok');
