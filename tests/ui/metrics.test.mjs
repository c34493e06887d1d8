// The live view's arithmetic (src/server/ui/metrics.js) and the SSE reader (sse.js), on
// exposition text written the way src/server/metrics.cpp writes it; expected figures are
// worked out by hand in the comments.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { labelValues, parsePrometheus, snapshot, sparkPoints, total } from '../../src/server/ui/metrics.js';
import { splitEvents, sseData } from '../../src/server/ui/sse.js';

const scrape = (completion, prompt, cached, drafted, accepted) => `# HELP power_rejections_total Requests turned away, by reason.
# TYPE power_rejections_total counter
power_rejections_total{reason="queue_full"} 3
power_rejections_total{reason="invalid_request"} 1
power_rejections_total{reason="deadline"} 0
# TYPE power_prompt_tokens_total counter
power_prompt_tokens_total ${prompt}
power_completion_tokens_total ${completion}
power_prompt_cache_tokens_total ${cached}
power_requests_running{model="a"} 2
power_requests_running{model="b \\"quoted\\""} 1
power_queue_depth{model="a"} 5
power_queue_depth{model="b \\"quoted\\""} 0
power_kv_blocks_used{model="a"} 10
power_kv_blocks_total{model="a"} 64
power_kv_blocks_total{model="b \\"quoted\\""} 32
power_time_to_first_token_seconds_bucket{le="+Inf"} 7
power_speculative_drafted_total{model="a"} ${drafted}
power_speculative_accepted_total{model="a"} ${accepted}
not a sample line
`;

test('Prometheus text parses into samples with unescaped labels', () => {
  const s = parsePrometheus(scrape(100, 400, 100, 0, 0));
  assert.equal(total(s, 'power_requests_running'), 3);
  assert.equal(total(s, 'power_requests_running', { model: 'b "quoted"' }), 1);
  assert.equal(total(s, 'power_time_to_first_token_seconds_bucket', { le: '+Inf' }), 7);
  assert.deepEqual(labelValues(s, 'power_kv_blocks_total', 'model'), ['a', 'b "quoted"']);
  assert.equal(s.filter((x) => x.name === 'not').length, 0);
});

test('two scrapes give rates; counters that go back give none', () => {
  const a = snapshot(parsePrometheus(scrape(100, 400, 100, 0, 0)), 10_000);
  assert.equal(a.tokensPerSecond, null);  // no previous scrape
  assert.equal(a.running, 3);
  assert.equal(a.waiting, 5);
  assert.equal(a.kvUsed, 10);
  assert.equal(a.kvTotal, 96);
  assert.equal(a.prefixHitRate, 0.25);  // 100 cached of 400 prompt tokens
  assert.equal(a.specAcceptance, null);  // nothing drafted
  assert.deepEqual(a.refusals, { queue_full: 3, invalid_request: 1 });  // zero counts left out
  // 150 more tokens in 2.5 s: 60 tokens/s; 30 of 40 drafts accepted.
  const b = snapshot(parsePrometheus(scrape(250, 800, 300, 40, 30)), 12_500, a);
  assert.equal(b.tokensPerSecond, 60);
  assert.equal(b.prefixHitRate, 300 / 800);
  assert.equal(b.specAcceptance, 0.75);
  // A restarted server: its counter is lower than before.
  const c = snapshot(parsePrometheus(scrape(5, 10, 0, 0, 0)), 13_500, b);
  assert.equal(c.tokensPerSecond, null);
});

test('sparkline points scale to the box', () => {
  // Max 4 (over the floor 1): 0 -> y 40, 4 -> y 0, 2 -> y 20; x spaced 100 apart.
  assert.deepEqual(sparkPoints([0, 4, 2], 200, 40), { points: '0.0,40.0 100.0,0.0 200.0,20.0', max: 4 });
  // Nulls are skipped, the floor keeps a flat zero line at the bottom.
  assert.deepEqual(sparkPoints([null, 0, 0], 200, 40), { points: '100.0,40.0 200.0,40.0', max: 1 });
});

test('SSE events split across chunks come out whole', async () => {
  assert.deepEqual(splitEvents('data: {"a":1}\n\ndata: x\ndata: y\n\n: comment\n\ndata: par'),
    { events: ['{"a":1}', 'x\ny'], rest: 'data: par' });
  const text = 'data: one\n\ndata: two\n\ndata: [DONE]\n\n';
  // Every split point of the byte stream, including inside the multi-byte character.
  const bytes = new TextEncoder().encode(`data: é\n\n${text}`);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const body = new ReadableStream({
      start(c) {
        c.enqueue(bytes.slice(0, cut));
        c.enqueue(bytes.slice(cut));
        c.close();
      },
    });
    const got = [];
    for await (const d of sseData(new Response(body))) got.push(d);
    assert.deepEqual(got, ['é', 'one', 'two', '[DONE]'], `cut at ${cut}`);
  }
});
