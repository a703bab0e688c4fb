#!/usr/bin/env node
// Runs an ONNX model in onnxruntime-node (CPU) and prints its outputs as JSON.
//
//   node tools/onnxrt/run.js MODEL.onnx INPUTS.json [--batch N]
//   node tools/onnxrt/run.js MODEL.onnx NAME=FILE.npy [NAME=FILE.npy ...] [--batch N]
//
// INPUTS.json: {"NAME": [[row], [row], ...]} (nested arrays, first dimension = rows) or
// {"NAME": {"dims": [...], "data": [flat values]}}. .npy files: the dtypes gradrun reads (lib/io/npy.cpp:
// <f8 <f4 <i8 <i4 <i2 |i1 |u1 <u2 <u4 <u8 |b1), C or Fortran order (a Fortran-order array is
// transposed to C order, as gradrun does). Every input is fed in the element type the model
// declares for it: float64 for a model exported with `--dtype f64`, float32 otherwise.
// --batch N: run the rows N at a time (a model exported with a fixed batch size needs its own N);
// a last partial batch is padded with copies of its first row and the padding dropped.
// Prints {"OUTPUT": {"dims": [...], "data": [flat values]}, ...} on stdout; exit 2 on a bad argument.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

function fail(msg) {
  process.stderr.write('run.js: ' + msg + '\n');
  process.exit(2);
}

// Column-major (Fortran) element order to row-major, as lib/io/npy.cpp fortran_to_c: walk the
// row-major index like an odometer and keep the matching column-major offset in step.
function fortranToC(f, dims) {
  const r = dims.length;
  const fstride = [];
  for (let k = 0, s = 1; k < r; ++k) fstride.push(s), s *= dims[k];
  const idx = new Array(r).fill(0);
  const c = new Float64Array(f.length);
  let off = 0;
  for (let i = 0; i < c.length; ++i) {
    c[i] = f[off];
    for (let k = r - 1; k >= 0; --k) {
      off += fstride[k];
      if (++idx[k] < dims[k]) break;
      off -= fstride[k] * dims[k];
      idx[k] = 0;
    }
  }
  return c;
}

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') fail(file + ': not a .npy file');
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  const order = /'fortran_order':\s*(True|False)/.exec(header);
  if (!descr || !shape || !order) fail(file + ': unsupported .npy header ' + header);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const body = buf.subarray(start + hlen);
  const kinds = {'<f8': [8, 'readDoubleLE'], '<f4': [4, 'readFloatLE'], '<i8': [8, 'readBigInt64LE'],
    '<i4': [4, 'readInt32LE'], '<i2': [2, 'readInt16LE'], '|i1': [1, 'readInt8'], '|u1': [1, 'readUInt8'],
    '<u2': [2, 'readUInt16LE'], '<u4': [4, 'readUInt32LE'], '<u8': [8, 'readBigUInt64LE'], '|b1': [1, 'readUInt8']};
  const k = kinds[descr[1]];
  if (!k) fail(file + ': dtype ' + descr[1] + ' (want one of ' + Object.keys(kinds).join(' ') + ')');
  if (body.length < n * k[0]) fail(file + ': ' + n + ' elements of ' + descr[1] + ' need ' + n * k[0] + ' bytes, got ' + body.length);
  const out = new Float64Array(n);
  for (let i = 0; i < n; ++i) out[i] = Number(body[k[1]](i * k[0]));
  return {dims, data: order[1] === 'True' && dims.length > 1 ? fortranToC(out, dims) : out};
}

function fromJson(v, name) {
  if (v && !Array.isArray(v) && Array.isArray(v.dims)) return {dims: v.dims, data: Float64Array.from(v.data)};
  if (!Array.isArray(v)) fail('input ' + name + ': want nested arrays or {"dims", "data"}');
  const dims = [];
  for (let x = v; Array.isArray(x); x = x[0]) dims.push(x.length);
  return {dims, data: Float64Array.from(v.flat(Infinity))};
}

async function main() {
  const args = process.argv.slice(2);
  let batch = 0;
  const rest = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--batch') batch = Number(args[++i]);
    else rest.push(args[i]);
  }
  if (rest.length < 2 || !(batch >= 0) || !Number.isInteger(batch)) {
    fail('usage: run.js MODEL.onnx INPUTS.json|NAME=FILE.npy... [--batch N]');
  }
  const feeds = {};
  if (rest.length === 2 && rest[1].endsWith('.json')) {
    const j = JSON.parse(fs.readFileSync(rest[1], 'utf8'));
    for (const [name, v] of Object.entries(j)) feeds[name] = fromJson(v, name);
  } else {
    for (const a of rest.slice(1)) {
      const eq = a.indexOf('=');
      if (eq < 1) fail('want NAME=FILE.npy, got ' + a);
      feeds[a.slice(0, eq)] = readNpy(a.slice(eq + 1));
    }
  }
  // A float64 model runs with graph optimization level basic: the extended level fuses a Transpose
  // feeding a MatMul into com.microsoft.FusedMatMul, which has float kernels only (onnxruntime 1.22),
  // so the session would not load. A float32 model keeps onnxruntime's defaults.
  let session = await ort.InferenceSession.create(rest[0], {graphOptimizationLevel: 'basic'});
  // Values are kept as read (f64) and converted once, to the input's declared element type.
  const types = {};
  session.inputNames.forEach((name, i) => {
    const m = session.inputMetadata ? session.inputMetadata[i] : undefined;
    types[name] = m && m.isTensor && m.type === 'float64' ? 'float64' : 'float32';
  });
  if (!Object.values(types).includes('float64')) session = await ort.InferenceSession.create(rest[0]);
  for (const name of session.inputNames) if (!feeds[name]) fail('no data for the model input ' + name);
  const rows = feeds[session.inputNames[0]].dims[0];
  const step = batch > 0 ? batch : rows;
  const outs = {};
  for (let s = 0; s < rows; s += step) {
    const n = Math.min(step, rows - s);
    const feed = {};
    for (const name of session.inputNames) {
      const f = feeds[name];
      if (f.dims[0] !== rows) fail('input ' + name + ' has ' + f.dims[0] + ' rows, ' + session.inputNames[0] + ' ' + rows);
      const w = f.data.length / rows;
      const chunk = types[name] === 'float64' ? new Float64Array(step * w) : new Float32Array(step * w);
      chunk.set(f.data.subarray(s * w, (s + n) * w));
      for (let r = n; r < step; ++r) chunk.set(f.data.subarray(s * w, (s + 1) * w), r * w);
      feed[name] = new ort.Tensor(types[name], chunk, [step, ...f.dims.slice(1)]);
    }
    const res = await session.run(feed);
    for (const name of session.outputNames) {
      const t = res[name];
      const w = t.dims[0] === step ? t.data.length / step : 0;
      if (!outs[name]) outs[name] = {dims: [0, ...t.dims.slice(1)], data: []};
      if (w === 0) {  // an output without the batch dimension: the last batch's value
        outs[name] = {dims: Array.from(t.dims), data: Array.from(t.data)};
        continue;
      }
      outs[name].dims[0] += n;
      for (const x of t.data.subarray(0, n * w)) outs[name].data.push(x);
    }
  }
  process.stdout.write(JSON.stringify(outs) + '\n');
}

main().catch((e) => fail(String(e && e.message ? e.message : e)));
