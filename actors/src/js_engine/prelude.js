
(() => {
  const call = globalThis.__gm_call;
  const say = globalThis.__gm_console;
  const describe = globalThis.__gm_describe;
  const gm = {};
  const verb = (name) => async function __gm_verb(args) {
    const site = new Error();
    const reply = JSON.parse(await call(name, JSON.stringify(args === undefined ? {} : args)));
    if (reply.ok) return reply.value;
    const err = new Error(reply.error.message);
    Object.assign(err, reply.error);
    err.name = 'GmError';
    err.stack = String(site.stack).split('\n').slice(1).join('\n');
    throw err;
  };
  // Names that are never calls: what JavaScript itself looks up on objects.
  const notCalls = new Set(['then', 'catch', 'finally', 'toJSON', 'toString', 'valueOf', 'constructor', 'inspect']);
  globalThis.__gm_install = function __gm_install(namesJson) {
  delete globalThis.__gm_install;
  for (const name of JSON.parse(namesJson)) gm[name] = verb(name);
  const known = Object.freeze(gm);
  // Any other name is still a call, so that a name no verb has gets a structured error
  // (unknown_verb, or why the child server it belongs to did not start) instead of a TypeError.
  globalThis.gm = new Proxy(known, {
    get(target, key, receiver) {
      if (typeof key !== 'string' || key in target || notCalls.has(key) || !/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) {
        return Reflect.get(target, key, receiver);
      }
      return verb(key);
    },
  });
  };
  gm.verbs = function __gm_verbs() { return JSON.parse(describe()); };
  gm.try = async function __gm_try(fn) {
    try {
      return await (typeof fn === 'function' ? fn() : fn);
    } catch (e) {
      const error = { code: (e && e.code) || (e && e.name) || 'Error', message: String(e && e.message !== undefined ? e.message : e) };
      return { ok: false, error };
    }
  };
  const show = (a) => {
    if (typeof a === 'string') return a;
    if (a instanceof Error) return String(a.stack ? a.name + ': ' + a.message + '\n' + a.stack : a);
    try { const s = JSON.stringify(a); return s === undefined ? String(a) : s; } catch (_) { return String(a); }
  };
  const line = (level) => function __gm_log(...args) { say(level, args.map(show).join(' ')); };
  globalThis.console = { log: line('log'), info: line('info'), debug: line('debug'), warn: line('warn'), error: line('error') };
  const modules = {};
  const load = globalThis.__gm_module;
  const makeRequire = (from) => function require(spec) {
    const r = JSON.parse(load(String(spec), from));
    if (!r.ok) { const e = new Error(r.error.message); Object.assign(e, r.error); throw e; }
    if (modules[r.path]) return modules[r.path].exports;
    const module = { exports: {} };
    modules[r.path] = module;
    if (r.path.endsWith('.json')) { module.exports = JSON.parse(r.source); return module.exports; }
    const fn = new Function('module', 'exports', 'require', '__filename', '__dirname', r.source);
    fn(module, module.exports, makeRequire(r.dir), r.path, r.dir);
    return module.exports;
  };
  globalThis.require = makeRequire('');
  const sleep = globalThis.__gm_sleep;
  const timers = new Map();
  let nextTimer = 1;
  const arm = (id, fn, ms, args, repeat) => {
    sleep(Math.max(0, Number(ms) || 0)).then(() => {
      if (!timers.has(id)) return;
      if (!repeat) timers.delete(id);
      fn(...args);
      if (repeat) arm(id, fn, ms, args, repeat);
    });
  };
  globalThis.setTimeout = function setTimeout(fn, ms, ...args) { const id = nextTimer++; timers.set(id, true); arm(id, fn, ms, args, false); return id; };
  globalThis.setInterval = function setInterval(fn, ms, ...args) { const id = nextTimer++; timers.set(id, true); arm(id, fn, Math.max(1, Number(ms) || 0), args, true); return id; };
  globalThis.clearTimeout = globalThis.clearInterval = function clearTimeout(id) { timers.delete(id); };
  const clock = globalThis.__gm_now;
  globalThis.performance = Object.freeze({ now: () => clock() });
  for (const k of ['__gm_call', '__gm_console', '__gm_describe', '__gm_module', '__gm_sleep', '__gm_now']) delete globalThis[k];
})();
