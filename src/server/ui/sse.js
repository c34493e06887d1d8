// Server-sent events from a fetch() body (chat streams, /api/pull progress). EventSource
// cannot POST or send an Authorization header, so the console reads the stream itself.

// Splits SSE text into events' data payloads (multi-line data joined with '\n'), given the
// text received so far; returns {events, rest} where rest is the unfinished tail.
export function splitEvents(buffer) {
  const events = [];
  const text = buffer.replace(/\r\n?/g, '\n');
  let start = 0;
  for (;;) {
    const end = text.indexOf('\n\n', start);
    if (end < 0) break;
    const block = text.slice(start, end);
    start = end + 2;
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
    }
    if (data.length > 0) events.push(data.join('\n'));
  }
  return { events, rest: text.slice(start) };
}

// Yields each event's data from a fetch Response whose body is text/event-stream.
export async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const { events, rest } = splitEvents(buffer);
    buffer = rest;
    for (const e of events) yield e;
  }
  buffer += decoder.decode();
  const { events } = splitEvents(`${buffer}\n\n`);
  for (const e of events) yield e;
}
