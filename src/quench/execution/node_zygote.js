// quench's JavaScript zygote: one warm node per sandbox worker that forks a child per program.
//
//   LD_PRELOAD=<node_fork.node> node --single-threaded node_zygote.js <node_fork.node> <rlimits json>
//
// Started by the fork server (forkserver.py) inside the worker's sandbox, with stdout and stderr
// on /dev/null, as a program's are. It loads lodash and warms what programs use (console, timers,
// promises) once, then reads requests, one JSON line each on stdin, and answers each on fd 3:
//   {"id", "cwd", "main", "stderr"} -> {"id", "status"}: fork; the child runs `main` as
//       `node main` would (Module.runMain), in `cwd`, stdin and stdout /dev/null, stderr to the
//       file `stderr`, in its own session, under the rlimits; the answer is its raw wait status.
//   {"id", "sync": true} -> {"id", "synced": true}: every earlier request is answered.
// The zygote never runs a program itself: each child is a fresh copy of the same state, so one
// program's objects, globals or patched modules never reach the next. V8 runs single-threaded,
// so a child needs no thread but the one fork copies.
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

const ANSWERS = 3;
const native = require(process.argv[2]);
const limits = JSON.parse(process.argv[3]);
delete process.env.LD_PRELOAD; // loaded already; programs see the environment plain node gets
try {
  require('lodash'); // in the module cache of every child, as if it had just loaded it
} catch (error) {
  // a machine without lodash: programs that require it fail as under plain node
}
warmUp();
native.dumpable(0);

// Compiled once here rather than lazily in every child: the streams of stdout and stderr (both
// /dev/null here, files or /dev/null in a child: the same kind of stream), console, timers,
// promises, JSON, util.inspect.
function warmUp() {
  console.log(JSON.stringify({ a: [1, 'b'] }), require('util').inspect(new Map([[1, { b: [2] }]])));
  console.error(new Error('warm').stack.length);
  clearTimeout(setTimeout(() => {}, 1));
  clearImmediate(setImmediate(() => {}));
  Promise.resolve(1).then(() => {});
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

function redirect(target, fd, flags) {
  const opened = fs.openSync(target, flags, 0o644);
  native.dup2(opened, fd);
  fs.closeSync(opened);
}

// In the child: leave through _exit once every 'exit' listener has run, in order, with the code
// node would exit with (this first listener runs the program's own ones itself). After an
// uncaught exception node prints it once the listeners are done: the child then exits with the
// code when node's teardown reaches its first thread join (node_fork.c).
function exitWhenDone() {
  let uncaught = false;
  process.on('uncaughtExceptionMonitor', () => {
    uncaught = process.listenerCount('uncaughtException') === 0; // else the program handles it
  });
  process.reallyExit = (code) => native.exit(code | 0);
  process.on('exit', function last(code) {
    const listeners = process.listeners('exit');
    for (const listener of listeners.slice(listeners.indexOf(last) + 1)) listener.call(process, code);
    const status = process.exitCode !== undefined ? process.exitCode | 0 : code;
    if (!uncaught) native.exit(status);
    native.exitAtTeardown(status);
    process.removeAllListeners('exit'); // node emits nothing more; it prints the exception, then tears down
  });
}

function becomeProgram(request) {
  native.setsid();
  native.dumpable(1);
  for (const [resource, soft, hard] of limits) native.limit(resource, soft, hard);
  process.chdir(request.cwd);
  redirect('/dev/null', 0, 'r');
  redirect('/dev/null', 1, 'w');
  redirect(request.stderr, 2, 'w');
  fs.closeSync(ANSWERS);
  exitWhenDone();
  process.argv = [process.argv[0], path.resolve(request.main)];
  Module.runMain();
}

for (;;) {
  const request = nextRequest();
  if (request === null) native.exit(0);
  if (request.sync) {
    answer({ id: request.id, synced: true });
    continue;
  }
  const pid = native.fork();
  if (pid === 0) {
    becomeProgram(request);
    return; // the child's event loop runs the program's callbacks, then 'exit'
  }
  answer(pid < 0 ? { id: request.id, error: `fork failed (errno ${-pid})` } : { id: request.id, status: native.wait(pid) });
}
