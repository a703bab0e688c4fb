#!/usr/bin/env node
// Runs an ONNX model in onnxruntime-node (CPU) and prints its outputs as JSON.
//
//   node tools/onnxrt/run.js MODEL.onnx INPUTS.json [--batch N]
//   node tools/onnxrt/run.js MODEL.onnx NAME=FILE.npy [NAME=FILE.npy ...] [--batch N]
//
// INPUTS.json: {"NAME": [[row], [row], ...]} (nested arrays, first dimension = rows) or
// {"NAME": {"dims": [...], "data": [flat values]}}. .npy files: little-endian f4, f8, i8 or i4,
// C order. Every input is fed as float32.
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

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') fail(file + ': not a .npy file');
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !shape || /'fortran_order':\s*True/.test(header)) fail(file + ': unsupported .npy header ' + header);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const body = buf.subarray(start + hlen);
  const out = new Float32Array(n);
  const kinds = {'<f4': [4, 'readFloatLE'], '<f8': [8, 'readDoubleLE'], '<i8': [8, 'readBigInt64LE'],
    '<i4': [4, 'readInt32LE']};
  const k = kinds[descr[1]];
  if (!k) fail(file + ': dtype ' + descr[1] + ' (want <f4, <f8, <i8 or <i4)');
  for (let i = 0; i < n; ++i) out[i] = Number(body[k[1]](i * k[0]));
  return {dims, data: out};
}

function fromJson(v, name) {
  if (v && !Array.isArray(v) && Array.isArray(v.dims)) return {dims: v.dims, data: Float32Array.from(v.data)};
  if (!Array.isArray(v)) fail('input ' + name + ': want nested arrays or {"dims", "data"}');
  const dims = [];
  for (let x = v; Array.isArray(x); x = x[0]) dims.push(x.length);
  return {dims, data: Float32Array.from(v.flat(Infinity))};
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
  const session = await ort.InferenceSession.create(rest[0]);
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
      const chunk = new Float32Array(step * w);
      chunk.set(f.data.subarray(s * w, (s + n) * w));
      for (let r = n; r < step; ++r) chunk.set(f.data.subarray(s * w, (s + 1) * w), r * w);
      feed[name] = new ort.Tensor('float32', chunk, [step, ...f.dims.slice(1)]);
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
