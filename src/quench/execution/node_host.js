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
// The boundary. A program is arbitrary code in its context: it may redefine every builtin, put
// accessors on its global object and throw anything. What keeps it from the host (and so from the
// next program's verdict) is how the host talks to the context, not which names the program uses:
// - Before the program's first instruction the host builds the context: a fresh one per program,
//   its own microtask queue (drained inside the time limit), no code generation from strings or
//   WebAssembly, lodash run from its source, then INSTALL, whose closure captures the builtins it
//   uses and holds the program's module function. None of this gives the context a value of the
//   host's realm.
// - From the program's first instruction on, the host only (a) calls that closure with a number,
//   (b) evaluates an empty script in the context (to drain its microtasks), (c) hands the context to
//   node's runInContext, which finds it by a private symbol. It never reads, writes or enumerates a
//   property of the context's global or of any value the program made, and never calls one of them.
// - What comes back is a primitive: a boolean (did the module function throw: the closure's own
//   control flow, which the program cannot reach) and a string (the error text, computed in the
//   context and used only as text). The host checks its type with `typeof`, which runs no code.
//   Whether it timed out the host tells by its own clock and by which of its own calls threw.
// - Every host function that can be on the stack below program code (this file, node's vm) is
//   strict code, so V8 gives the program neither its function nor its receiver (CallSite
//   getFunction/getThis, `caller`).
// - The values node itself creates in its realm and could hand to context code are the errors of a
//   dynamic `import()` (a keyword: it cannot be spelt with escapes, and code generation is off) and
//   its stack-trace formatting (which creates strings and the context's CallSites). A source that
//   contains `import` is never compiled. The host never returns to node's event loop, so nothing node
//   defers (timers, unhandled-rejection reports, finalizers) ever runs program code.
// Everything else the host declines (below) keeps a verdict that of plain node, not the host safe.
//
// A context has only JavaScript's own globals: no `process`, no module but lodash, no timers, no
// file system. A program that names none of node's own globals, requires nothing but lodash and
// uses no promise (whose unhandled rejection node reports at exit) computes exactly as under node.
// Any other program is declined, as is one that names what could reach such globals indirectly
// (`eval`, `Function`, `globalThis`, `Proxy`, a `.constructor` property, a `\u` escape), reads stack
// traces (whose frames differ) or uses lodash's `template` (it compiles code from strings). The
// names are checked over the whole text, strings and comments included.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const ANSWERS = 3;
const TIMEOUT_MS = Number(process.argv[2]) || 10000;
const FORMAT_TIMEOUT_MS = 1000;
const DETAIL_CHARS = 2000;
const MODULE_PARAMETERS = ['exports', 'require', 'module', '__filename', '__dirname'];
const IDENTIFIER = /[A-Za-z_$][\w$]*/g;
// Names a program may use only as node lets it: require('lodash') and module.exports.
const REQUIRE_LODASH = /^require\s*\(\s*(['"])lodash\1\s*\)/;
const MODULE_EXPORTS = /^module\s*\.\s*exports\b/;
const DECLINED_NAMES = new Set([
  'eval', 'Function', 'globalThis', 'import', 'Promise', 'async', 'await', 'Proxy', 'Atomics',
  'SharedArrayBuffer', 'WebAssembly', 'WeakRef', 'FinalizationRegistry', 'prepareStackTrace',
  'captureStackTrace', 'stackTraceLimit', 'caller', 'callee', 'template',
]);
// Names declined as a property (`x.stack`, `x['constructor']`, `get stack()`), not as a variable or a
// class's constructor.
const DECLINED_PROPERTIES = new Set(['stack', 'constructor']);
const PROPERTY_BEFORE = /(?:[.'"`]|\bget|\bset)\s*$/;
for (const name of nodeOnlyGlobals()) DECLINED_NAMES.add(name);
const CONTEXT_OPTIONS = { codeGeneration: { strings: false, wasm: false }, microtaskMode: 'afterEvaluate' };

const lodash = loadLodash();
// Run in each fresh context before the program: the one closure the host keeps of it. step(0) runs
// the module function and says whether it threw; step(1) is the text of what it threw, as node prints
// it (the line of `file` its stack names first, that line's number, then name and message). Each
// answer is a primitive whatever the program did to the builtins (String() of anything is a string
// or throws).
const INSTALL = new vm.Script(`'use strict';
(function install(main, lodashModule, file, lodashFile) {
  const apply = Reflect.apply, toText = String, ErrorType = Error, dirname = (name) => name.slice(0, name.lastIndexOf('/')) || '/';
  const module = { exports: {} }, dir = dirname(file);
  const lodash = lodashModule === undefined ? undefined : { exports: {} };
  if (lodash) apply(lodashModule, lodash.exports, [lodash.exports, undefined, lodash, lodashFile, dirname(lodashFile)]);
  const require = function require(name) {
    if (name === 'lodash' && lodash) return lodash.exports;
    throw new ErrorType("Cannot find module '" + name + "'");
  };
  let threw = false, thrown;
  function describe() {
    try {
      if (!(thrown instanceof ErrorType)) return '\\n' + toText(thrown);
      const frame = toText(thrown.stack).split('\\n').find((line) => line.includes(file + ':'));
      const line = frame ? frame.slice(frame.lastIndexOf(file + ':') + file.length + 1).split(':')[0] : '';
      return toText(line) + '\\n' + toText(thrown.name) + ': ' + toText(thrown.message);
    } catch (error) {
      return '\\nUncaught exception';
    }
  }
  return function step(which) {
    if (which === 1) return describe();
    try {
      apply(main, module.exports, [module.exports, require, module, file, dir]);
    } catch (error) {
      threw = true;
      thrown = error;
    }
    return threw;
  };
})`, { filename: 'quench:install' });
const DRAIN = new vm.Script('');
// Calls `calling` (a context's step) under a time limit: node's limit covers scripts only. Strict, so
// its frame shows the program no receiver.
const CALL = new vm.Script("'use strict'; quenchHostCall();", { filename: 'quench:call' });
let calling = null;
let callingWith = 0;
Object.defineProperty(globalThis, 'quenchHostCall', { value: () => calling(callingWith) });

// The names of node's global object that a fresh context lacks (process, Buffer, setTimeout, ...).
function nodeOnlyGlobals() {
  const context = vm.createContext(Object.create(null));
  const own = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', context));
  return Object.getOwnPropertyNames(globalThis).filter((name) => !own.has(name));
}

// lodash's module function, compiled once here (with its code cache) and evaluated in every context that
// requires it. It finds its global object as `globalThis`, so it needs no code generation.
function loadLodash() {
  let file;
  try {
    file = require.resolve('lodash');
  } catch (error) {
    return null; // a machine without lodash: programs that require it are declined, and fail under node
  }
  const source = `(function (${MODULE_PARAMETERS.join(', ')}) {${fs.readFileSync(file, 'utf8')}\n})`;
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
  if (source.includes('import')) return 'contains `import`'; // also inside a longer word: never compiled
  return source.includes('\\u') ? 'has a unicode escape (it may spell a name)' : '';
}

// `step(which)` under `limit` ms: its primitive answer, or {timeout} / {failure} (the host's own
// objects) when node's limit or something else ended it. The thrown value is never looked at.
function callStep(step, which, limit) {
  calling = step;
  callingWith = which;
  const started = Date.now();
  try {
    return CALL.runInThisContext({ timeout: limit, displayErrors: false });
  } catch (ignored) {
    return Date.now() - started >= limit ? TIMED_OUT : FAILED;
  } finally {
    calling = null;
  }
}
const TIMED_OUT = Object.freeze({ timeout: true });
const FAILED = Object.freeze({ failure: true });

function drain(context, limit) {
  const started = Date.now();
  try {
    DRAIN.runInContext(context, { timeout: Math.max(1, limit), displayErrors: false });
    return true;
  } catch (ignored) {
    return Date.now() - started < limit; // false: the microtasks ran past the limit
  }
}

// The text of what a program threw, as node prints it: where (a line of `file` and that line), then what.
function thrownText(step, file, source) {
  const answer = callStep(step, 1, FORMAT_TIMEOUT_MS);
  const text = typeof answer === 'string' ? answer : '\nUncaught exception';
  const cut = text.indexOf('\n');
  const line = text.slice(0, cut);
  const where = /^\d+$/.test(line) ? `${file}:${line}\n${source.split('\n')[Number(line) - 1] ?? ''}\n` : `${file}\n`;
  return `${where}\n${text.slice(cut + 1)}`.slice(0, DETAIL_CHARS);
}

// The context and its step closure, built before any of the program runs; {syntax} when it does not parse.
function prepare(file, source) {
  const context = vm.createContext(Object.create(null), CONTEXT_OPTIONS);
  let main;
  try {
    main = vm.compileFunction(source, MODULE_PARAMETERS, { filename: file, parsingContext: context });
  } catch (error) { // made before any program code ran: the context's Error is still its own
    return { syntax: `${String(error.stack).split('\n    at ')[0]}\n` }; // node --check's text
  }
  const wantsLodash = lodash !== null && source.includes('lodash');
  const lodashModule = wantsLodash ? lodash.script.runInContext(context, { displayErrors: false }) : undefined;
  const install = INSTALL.runInContext(context, { displayErrors: false });
  return { context, step: install(main, lodashModule, file, lodash ? lodash.file : '') };
}

function run(request) {
  const file = path.resolve(request.cwd, request.main);
  const source = fs.readFileSync(file, 'utf8');
  const reason = declineReason(source);
  if (reason) return { declined: reason };
  const prepared = prepare(file, source);
  if (prepared.syntax !== undefined) {
    fs.writeFileSync(request.stderr, prepared.syntax);
    return { status: 1, syntax: true };
  }
  // From here on the program runs: the host holds only `step` and the context (see the top).
  const started = Date.now();
  const threw = callStep(prepared.step, 0, TIMEOUT_MS);
  if (threw === TIMED_OUT) return { timeout: true };
  if (threw === true) {
    fs.writeFileSync(request.stderr, `${thrownText(prepared.step, file, source)}\n`);
    return { status: 1 };
  }
  if (threw !== false) return { declined: 'host: the program did not end as a program does' };
  // node runs the microtasks after the main module: within the same limit
  return drain(prepared.context, TIMEOUT_MS - (Date.now() - started)) ? { status: 0 } : { timeout: true };
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
  } catch (error) { // the host's own failure (a file it cannot read or write): node decides
    outcome = { declined: `host: ${error.message}` };
  }
  answer({ id: request.id, ...outcome });
}
