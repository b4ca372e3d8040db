// quench's JavaScript host: one warm node per sandbox worker that runs each program in a fresh V8 context.
//
//   node node_host.js <timeout ms>
//
// Started by the fork server (forkserver.py) inside the worker's sandbox, with stdout and stderr on
// /dev/null and the programs' uid and rlimits but the CPU one. It reads requests, one JSON line
// each on stdin, and answers each on fd 3:
//   {"id", "cwd", "main", "stderr"} -> {"id", "status", "syntax"?} | {"id", "declined"} | {"id", "timeout"}:
//       runs `cwd/main` as `node main` would run it, in a context of its own, its error text
//       written to the file `stderr`; "syntax" when it does not parse (what `node --check` says);
//       "declined" when the program may do what a context cannot do as node does (below): the
//       launcher then starts node for it.
//   {"id", "sync": true} -> {"id", "synced": true}: every earlier request is answered.
//
// A context has only JavaScript's own globals: no `process`, no module but lodash, no timers, no
// file system. A program that names none of node's own globals, requires nothing but lodash and
// uses no promise (whose unhandled rejection node reports at exit) computes exactly as under node,
// and can reach nothing of the host: the context's global object has no prototype of the host's
// realm, lodash is loaded into each context from its source, and nothing else of the host is
// handed in. Any other program is declined, as is one that names what could reach such globals
// indirectly (`eval`, `Function`, `globalThis`, `Proxy`, a `.constructor` property, a `\u` escape)
// or that reads stack traces (whose frames differ). So one program's globals, patched builtins or
// lodash never reach the next, and the verdict is node's: the names are checked over the whole
// text, strings and comments included.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const Module = require('module');

const ANSWERS = 3;
const TIMEOUT_MS = Number(process.argv[2]) || 10000;
const FORMAT_TIMEOUT_MS = 1000;
const DETAIL_CHARS = 2000;
const ARGS = '__quench_module_arguments__';
const IDENTIFIER = /[A-Za-z_$][\w$]*/g;
// Names a program may use only as node lets it: require('lodash') and module.exports.
const REQUIRE_LODASH = /^require\s*\(\s*(['"])lodash\1\s*\)/;
const MODULE_EXPORTS = /^module\s*\.\s*exports\b/;
const DECLINED_NAMES = new Set([
  'eval', 'Function', 'globalThis', 'import', 'Promise', 'async', 'await', 'Proxy', 'Atomics',
  'SharedArrayBuffer', 'WebAssembly', 'WeakRef', 'FinalizationRegistry', 'prepareStackTrace',
  'captureStackTrace', 'stackTraceLimit', 'caller', 'callee',
]);
// Names declined as a property (`x.stack`, `x['constructor']`, `get stack()`), not as a variable or a
// class's constructor.
const DECLINED_PROPERTIES = new Set(['stack', 'constructor']);
const PROPERTY_BEFORE = /(?:[.'"`]|\bget|\bset)\s*$/;
for (const name of nodeOnlyGlobals()) DECLINED_NAMES.add(name);

const lodash = loadLodash();
// Calls the program's module function with the arguments the host leaves on the context's global object.
const CALL_MAIN = new vm.Script(
  `(function () { const a = globalThis.${ARGS}; delete globalThis.${ARGS}; return a[5].call(a[0], ...a.slice(0, 5)); })()`);

// The names of node's global object that a fresh context lacks (process, Buffer, setTimeout, ...).
function nodeOnlyGlobals() {
  const context = vm.createContext(Object.create(null));
  const own = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', context));
  return Object.getOwnPropertyNames(globalThis).filter((name) => !own.has(name));
}

// lodash's module, compiled once here (with its code cache) and run in every context that requires it.
function loadLodash() {
  let file;
  try {
    file = require.resolve('lodash');
  } catch (error) {
    return null; // a machine without lodash: programs that require it are declined, and fail under node
  }
  const source = Module.wrap(fs.readFileSync(file, 'utf8'));
  const first = new vm.Script(source, { filename: file, produceCachedData: true });
  return { file, script: new vm.Script(source, { filename: file, cachedData: first.createCachedData() }) };
}

// Why the host will not run `source` ('' when it will).
function declineReason(source) {
  for (const match of source.matchAll(IDENTIFIER)) {
    const name = match[0];
    const rest = source.slice(match.index, match.index + 40);
    if (name === 'require' && !(lodash && REQUIRE_LODASH.test(rest))) return 'requires a module other than lodash';
    if (name === 'module' && !MODULE_EXPORTS.test(rest)) return 'uses `module` other than module.exports';
    if (DECLINED_NAMES.has(name)) return `names \`${name}\``;
    if (DECLINED_PROPERTIES.has(name) && (PROPERTY_BEFORE.test(source.slice(Math.max(0, match.index - 8), match.index))
        || /^\s*['"`]/.test(source.slice(match.index + name.length, match.index + name.length + 2)))) {
      return `reads \`${name}\``;
    }
  }
  return source.includes('\\u') ? 'has a unicode escape (it may spell a name)' : '';
}

// The context's own `module`, `require` and lodash (instantiated from its source in the context).
function moduleArguments(context, file, source) {
  const made = vm.runInContext(`({ module: { exports: {} }, lodash: { exports: {} } })`, context);
  if (lodash && source.includes('lodash')) {
    const wrapper = lodash.script.runInContext(context);
    wrapper.call(made.lodash.exports, made.lodash.exports, undefined, made.lodash, lodash.file, path.dirname(lodash.file));
  }
  const makeRequire = vm.runInContext(`(lodash) => function require(name) {
    if (name === 'lodash') return lodash.exports;
    throw new Error("Cannot find module '" + name + "'");
  }`, context);
  const module = made.module;
  return [module.exports, makeRequire(made.lodash), module, file, path.dirname(file)];
}

// The text of what a program threw, as node prints it: where (for an Error, the line of `file` its
// stack names first, and that line), then what. Formatted inside the program's context under a time
// limit: the value may be an object whose conversion runs the program's code.
function thrownText(context, thrown, file, source) {
  context[ARGS] = [thrown, file];
  let what;
  try {
    what = vm.runInContext(`(() => { const [e, file] = globalThis.${ARGS}; delete globalThis.${ARGS};
      if (!(e instanceof Error)) return ['', String(e)];
      const frame = String(e.stack).split('\\n').find((line) => line.includes(file + ':'));
      const line = frame ? frame.slice(frame.lastIndexOf(file + ':') + file.length + 1).split(':')[0] : '';
      return [String(line), String(e.name) + ': ' + String(e.message)]; })()`, context,
    { timeout: FORMAT_TIMEOUT_MS, displayErrors: false });
    what = [String(what[0]), String(what[1])];
  } catch (error) {
    what = ['', 'Uncaught exception'];
  }
  const [line, text] = what;
  const where = /^\d+$/.test(line) ? `${file}:${line}\n${source.split('\n')[Number(line) - 1] ?? ''}\n` : `${file}\n`;
  return `${where}\n${text}`.slice(0, DETAIL_CHARS);
}

function run(request) {
  const file = path.resolve(request.cwd, request.main);
  const source = fs.readFileSync(file, 'utf8');
  const reason = declineReason(source);
  if (reason) return { declined: reason };
  let main;
  const context = vm.createContext(Object.create(null));
  try {
    main = new vm.Script(Module.wrap(source), { filename: file }).runInContext(context, { displayErrors: false });
  } catch (error) {
    fs.writeFileSync(request.stderr, `${String(error.stack).split('\n    at ')[0]}\n`); // node --check's text
    return { status: 1, syntax: true };
  }
  context[ARGS] = [...moduleArguments(context, file, source), main];
  const started = Date.now();
  try {
    // displayErrors off: node would read the thrown value's `stack`, outside the time limit
    CALL_MAIN.runInContext(context, { timeout: TIMEOUT_MS, displayErrors: false });
  } catch (thrown) {
    // node's timeout error is an object of the context's realm, like the program's own: told by the clock
    if (Date.now() - started >= TIMEOUT_MS) return { timeout: true };
    fs.writeFileSync(request.stderr, `${thrownText(context, thrown, file, source)}\n`);
    return { status: 1 };
  }
  return { status: 0 };
}

let pending = Buffer.alloc(0);
const chunk = Buffer.alloc(65536);

function nextRequest() {
  let end;
  while ((end = pending.indexOf(10)) < 0) {
    const size = fs.readSync(0, chunk, 0, chunk.length, null);
    if (size === 0) return null;
    pending = Buffer.concat([pending, chunk.subarray(0, size)]);
  }
  const line = pending.subarray(0, end).toString('utf8');
  pending = pending.subarray(end + 1);
  return JSON.parse(line);
}

function answer(message) {
  const data = Buffer.from(JSON.stringify(message) + '\n');
  for (let done = 0; done < data.length;) done += fs.writeSync(ANSWERS, data, done);
}

for (let request = nextRequest(); request !== null; request = nextRequest()) {
  if (request.sync) {
    answer({ id: request.id, synced: true });
    continue;
  }
  let outcome;
  try {
    outcome = run(request);
  } catch (error) {
    outcome = { declined: `host: ${error.message}` };
  }
  answer({ id: request.id, ...outcome });
}
