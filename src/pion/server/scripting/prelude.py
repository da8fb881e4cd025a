"""The Lua source that turns a bare Lua 5.1 state into Redis 7's scripting sandbox.

It runs once per state (the EVAL state and the FUNCTION state), receives the Python bridge
(``redis.call`` and friends) as arguments and keeps it in upvalues only, and returns a table of
internal entry points (``run``, ``compile``, ``classify``, ``load_library``, ...) for Python.

Redis protects globals with a patched Lua (read-only tables). Stock Lua 5.1 has no such flag, so
every user chunk runs with an empty proxy as its environment (``setfenv``; ``loadstring`` and
``load`` are wrapped to do the same; the thread's own globals stay lupa's, out of reach): reads fall through to the real table (a missing name
raises "Script attempted to access nonexistent global variable"), writes raise "Attempt to modify
a readonly table". Library tables (``string``, ``redis``, ``cjson`` ...) are proxied the same way,
and ``rawset``/``rawget``/``next``/``pairs``/``ipairs``/``setmetatable`` see through the proxies
as Redis's do. All of this code is compiled with the chunk name ``=pion`` so that the error
handler and the kill hook can tell it apart from user code.
"""

PRELUDE = r"""
local B, MODE, VERSION, VERSION_NUM, CJSON_SRC = ...
local INTERNAL = '=pion'
local _G0 = _G
local type, error, tostring, tonumber, select, unpack = type, error, tostring, tonumber, select, unpack
local pcall, xpcall, rawget, rawset, rawequal, next = pcall, xpcall, rawget, rawset, rawequal, next
local pairs, ipairs, setmetatable, getmetatable = pairs, ipairs, setmetatable, getmetatable
local loadstring, load, setfenv, newproxy = loadstring, load, setfenv, newproxy
local sethook, getinfo = debug.sethook, debug.getinfo
local floor, clock = math.floor, os.clock
local sub, gsub, byte, find, lower = string.sub, string.gsub, string.byte, string.find, string.lower
local py_killed, py_now, py_unwrap = B.killed, B.now, B.unwrap

-- read-only proxies -----------------------------------------------------------------------
local backing = setmetatable({}, {__mode = 'k'})
local function readonly_error() error('Attempt to modify a readonly table', 2) end
local function protect(t, index)
  local proxy = {}
  backing[proxy] = t
  setmetatable(proxy, {__index = index or t, __newindex = readonly_error, __metatable = false})
  return proxy
end
local function copy(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end
local function missing_global(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
local function strict(t) return setmetatable(t, {__index = missing_global}) end

-- errors ----------------------------------------------------------------------------------
local function user_frame(level)
  while true do
    local i = getinfo(level, 'Sl')
    if i == nil then return nil end
    if i.what ~= 'C' and i.what ~= 'tail' and i.source ~= INTERNAL then return i end
    level = level + 1
  end
end
-- errors raised by Python callables arrive as the Python exception: get the Lua value back
local function unwrap(e)
  if type(e) == 'userdata' then
    local v = py_unwrap(e)
    if v ~= nil then return v end
  end
  return e
end
local function errh(err)
  err = unwrap(err)
  local i = user_frame(2)
  if type(err) == 'string' and sub(err, 1, 5) == 'pion:' then
    -- raised inside the sandbox's own Lua code: show the user's position instead (none when a
    -- tail call from user code into that code erased the user's frame)
    local rest = gsub(err, '^pion:%d+: ?', '', 1)
    err = i and (i.short_src .. ':' .. i.currentline .. ': ' .. rest) or rest
  end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if i then rawset(err, 'source', i.source); rawset(err, 'line', i.currentline) end
  return err
end
local function raise(msg) error({err = msg}, 0) end

-- base library, as Redis 7.0 exposes it ------------------------------------------------------
local R = {}
for _, k in ipairs({'assert', 'collectgarbage', 'error', 'gcinfo', 'getmetatable', 'rawequal',
                    'select', 'tonumber', 'unpack', '_VERSION'}) do
  R[k] = _G0[k]
end
local function fix_pcall(ok, ...)
  if ok then return ok, ... end
  local e = unwrap((...))
  if type(e) == 'table' then
    local m = rawget(e, 'err')
    if type(m) == 'string' or type(m) == 'number' then return false, m end
  end
  return false, e
end
R.pcall = function(f, ...) return fix_pcall(pcall(f, ...)) end
R.xpcall = function(f, h) return xpcall(f, function(e) return h(unwrap(e)) end) end
local function fix_resume(ok, ...)
  if ok then return ok, ... end
  return false, unwrap((...))
end
R.rawset = function(t, k, v)
  if backing[t] ~= nil then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
R.rawget = function(t, k) return rawget(backing[t] or t, k) end
R.next = function(t, k) return next(backing[t] or t, k) end
R.pairs = function(t)
  local b = backing[t]
  if b ~= nil then return next, b, nil end
  return pairs(t)
end
R.ipairs = function(t) return ipairs(backing[t] or t) end
R.setmetatable = function(t, m)
  if backing[t] ~= nil then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, m)
end
local function no_binary(name, chunkname)
  return nil, '[string "' .. tostring(chunkname or name) .. '"]:1: binary chunks are not allowed'
end
local G  -- the globals proxy every user function runs with (set below)
local dump, py_untail = string.dump, B.untail
-- user code is compiled without tail calls (tailcalls.py: ``return redis.call(...)`` keeps the
-- script's frame and so the line errors report, now that redis.call is a Lua function)
local function sandboxed(f, err)
  if f then
    f = loadstring(py_untail(dump(f)))
    setfenv(f, G)
  end
  return f, err
end
R.loadstring = function(s, name)
  if type(s) == 'string' and byte(s, 1) == 27 then return no_binary(s, name) end
  return sandboxed(loadstring(s, name))
end
R.load = function(f, name)
  local first = true
  local function reader()
    local piece = f()
    if first and type(piece) == 'string' and byte(piece, 1) == 27 then piece = '' end
    if piece ~= '' then first = false end
    return piece
  end
  if type(f) ~= 'function' then return load(f, name) end
  return sandboxed(load(reader, name))
end

-- libraries: math.random/randomseed (Redis's rand48), bit, struct, cmsgpack and cjson's entry
-- points are Python callables, so a tail call to them keeps the caller's frame (error positions)
local M = copy(math)
M.random, M.randomseed = B.random, B.randomseed
local null = newproxy()
local cjson = loadstring(CJSON_SRC, INTERNAL)(null, B.cjson_wrap)
local C = copy(coroutine)
local resume = coroutine.resume
C.resume = function(co, ...) return fix_resume(resume(co, ...)) end

R.string = protect(copy(string))
R.math = protect(M)
R.table = protect(copy(table))
R.coroutine = protect(C)
R.os = protect({clock = clock})
R.cjson = protect(cjson)
R.bit = protect(copy(B.bit))
R.struct = protect(copy(B.struct))
R.cmsgpack = protect(copy(B.cmsgpack))
-- Python callables are userdata to Lua; scripts see them as functions, as Redis's C functions
local pyfuncs = setmetatable({}, {__mode = 'k'})
for _, lib in ipairs({M, B.bit, B.struct, B.cmsgpack, cjson}) do
  for _, v in next, lib do if type(v) == 'userdata' and v ~= null then pyfuncs[v] = true end end
end
R.type = function(...)
  if select('#', ...) > 0 and pyfuncs[(...)] then return 'function' end
  return type(...)
end
R.tostring = function(...)
  if select('#', ...) > 0 and pyfuncs[(...)] then return 'function: builtin' end
  return tostring(...)
end
local string_meta = getmetatable('')
string_meta.__index = R.string
string_meta.__metatable = false

-- the redis API ------------------------------------------------------------------------------
local api = {}
for _, k in ipairs({'call', 'pcall', 'acl_check_cmd', 'log', 'setresp', 'set_repl', 'sha1hex'}) do
  api[k] = B[k]
end
-- lupa refuses a call into Python with more than 7,997 arguments (lua_checkstack under
-- LUAI_MAXCSTACK); Redis's C redis.call takes what Lua's stack holds (unpack's 7,999 values plus
-- the command and key): a long list goes over as one table instead
local SHORT = 7900
local function long_args(direct, packed)
  local f = function(...)
    local n = select('#', ...)
    if n <= SHORT then return direct(...) end
    return packed({...}, n)
  end
  return f
end
for _, k in ipairs({'call', 'pcall', 'acl_check_cmd'}) do
  api[k] = long_args(B[k], B[k .. '_packed'])
end
api.LOG_DEBUG, api.LOG_VERBOSE, api.LOG_NOTICE, api.LOG_WARNING = 0, 1, 2, 3
api.REDIS_VERSION, api.REDIS_VERSION_NUM = VERSION, VERSION_NUM
api.REPL_NONE, api.REPL_AOF, api.REPL_SLAVE, api.REPL_REPLICA, api.REPL_ALL = 0, 1, 2, 2, 3
local function wrong_args() return {err = 'ERR wrong number or type of arguments'} end
api.error_reply = function(...)
  local e = ...
  if select('#', ...) ~= 1 or type(e) ~= 'string' then return wrong_args() end
  if sub(e, 1, 1) ~= '-' then e = '-' .. e end
  local code, msg
  local sp = find(e, ' ', 1, true)
  if sp == nil then code, msg = 'ERR', sub(e, 2) else code, msg = sub(e, 2, sp - 1), sub(e, sp + 1) end
  msg = gsub(gsub(msg, '^[\r\n]+', ''), '[\r\n]+$', '')
  return {err = code .. ' ' .. msg}
end
api.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then return wrong_args() end
  return {ok = s}
end
if MODE == 'eval' then
  api.replicate_commands = function() return true end
  api.breakpoint = function() return false end
  api.debug = function() end
  R.__redis__err__handler = errh
end
for k, v in next, api do
  if type(v) == 'userdata' or k == 'call' or k == 'pcall' or k == 'acl_check_cmd' then pyfuncs[v] = true end
end
R.redis = protect(api)

-- the globals proxy --------------------------------------------------------------------------
strict(R)
G = {}
-- getmetatable(_G) is a read-only empty table: writing to it fails as Redis's does ("Attempt to
-- modify a readonly table"), and it hands out nothing (the real __index is R itself)
local gmeta = {__index = R, __newindex = readonly_error, __metatable = protect({})}
setmetatable(G, gmeta)
backing[G] = R
R._G = G

-- running user code --------------------------------------------------------------------------
local function kill_hook()
  if py_killed() then
    local i = getinfo(2, 'S')
    if i and i.source == INTERNAL then return end
    sethook(kill_hook, 'l')
    error({err = 'ERR Script killed by user with SCRIPT KILL...'}, 0)
  end
end
local cur_fn, cur_keys, cur_args, cur_isfunc
local function invoke()
  if cur_isfunc then return cur_fn(cur_keys, cur_args) end
  return cur_fn()
end
local function run(fn, keys, args, isfunc)
  if not isfunc then rawset(R, 'KEYS', keys); rawset(R, 'ARGV', args) end
  cur_fn, cur_keys, cur_args, cur_isfunc = fn, keys, args, isfunc
  sethook(kill_hook, '', 100000)
  local ok, res = xpcall(invoke, errh)
  sethook()
  cur_fn, cur_keys, cur_args = nil, nil, nil
  return ok, res
end
-- run with KEYS and ARGV passed as arguments (nk keys, then the args): Lua builds both tables
-- with its own constructor, cheaper than two tables made from Python lists
local function run_va(fn, isfunc, nk, ...)
  local all = {...}
  return run(fn, {unpack(all, 1, nk)}, {unpack(all, nk + 1, select('#', ...))}, isfunc)
end
local function compile(body, chunkname)
  if byte(body, 1) == 27 then
    return nil, sub(chunkname, 2) .. ":1: unexpected symbol near '<\\27>'"
  end
  return sandboxed(loadstring(body, chunkname))
end

-- FUNCTION LOAD: the library API and its environment -------------------------------------------
local FLAGS = {'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}
local registered
local function rf_err(msg) raise('ERR ' .. msg) end
local function read_flags(t)
  local set = {}
  for _, v in next, t do
    if type(v) ~= 'string' then return nil end
    local known = false
    for _, f in ipairs(FLAGS) do if f == v then known = true end end
    if not known then return nil end
    set[v] = true
  end
  local list = {}
  for _, f in ipairs(FLAGS) do if set[f] then list[#list + 1] = f end end
  return list
end
local function named_args(t)
  if type(t) ~= 'table' then
    rf_err('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
  end
  local name, fn, flags, desc
  for k, v in next, t do
    if type(k) ~= 'string' and type(k) ~= 'number' then
      rf_err('named argument key given to redis.register_function is not a string')
    end
    local key = lower(tostring(k))
    local vt = type(v)
    if key == 'function_name' then
      if vt ~= 'string' and vt ~= 'number' then rf_err('function_name argument given to redis.register_function must be a string') end
      name = tostring(v)
    elseif key == 'description' then
      if vt ~= 'string' and vt ~= 'number' then rf_err('description argument given to redis.register_function must be a string') end
      desc = tostring(v)
    elseif key == 'callback' then
      if vt ~= 'function' then rf_err('callback argument given to redis.register_function must be a function') end
      fn = v
    elseif key == 'flags' then
      if vt ~= 'table' then rf_err('flags argument to redis.register_function must be a table representing function flags') end
      flags = read_flags(v)
      if flags == nil then rf_err('unknown flag given') end
    else
      rf_err('unknown argument given to redis.register_function')
    end
  end
  if name == nil then rf_err('redis.register_function must get a function name argument') end
  if fn == nil then rf_err('redis.register_function must get a callback argument') end
  return name, fn, flags or {}, desc
end
local function register_function(...)
  if registered == nil then raise('ERR redis.register_function can only be called on FUNCTION LOAD command') end
  local n = select('#', ...)
  if n < 1 or n > 2 then rf_err('wrong number of arguments to redis.register_function') end
  local name, fn, flags, desc
  if n == 1 then
    name, fn, flags, desc = named_args((...))
  else
    local a, f = ...
    if type(a) ~= 'string' and type(a) ~= 'number' then rf_err('first argument to redis.register_function must be a string') end
    if type(f) ~= 'function' then rf_err('second argument to redis.register_function must be a function') end
    name, fn, flags = tostring(a), f, {}
  end
  if name == '' or find(name, '[^%w_]') then
    rf_err('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if registered.names[name] then rf_err('Function already exists in the library') end
  registered.names[name] = true
  registered.list[#registered.list + 1] = {name = name, fn = fn, flags = flags, desc = desc}
end
local load_api = strict({register_function = register_function, log = api.log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = VERSION, REDIS_VERSION_NUM = VERSION_NUM})
local LOAD_ENV = strict({redis = protect(load_api, load_api)})
local load_deadline
local function load_hook()
  if py_now() > load_deadline then
    local i = getinfo(2, 'S')
    if i and i.source == INTERNAL then return end
    sethook(load_hook, 'l')
    raise('ERR FUNCTION LOAD timeout')
  end
end
local function load_errh(err)
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  return err
end
local function load_library(fn, deadline)
  registered = {names = {}, list = {}}
  gmeta.__index = LOAD_ENV
  load_deadline = deadline
  sethook(load_hook, '', 100000)
  local ok, e = xpcall(fn, load_errh)
  sethook()
  gmeta.__index = R
  local reg = registered
  registered = nil
  if not ok then return false, e end
  return true, reg.list
end

-- Lua -> reply helpers -------------------------------------------------------------------------
local function classify(t)
  local v = rawget(t, 'err')
  if type(v) == 'string' then return 1, v end
  v = rawget(t, 'ok')
  if type(v) == 'string' then return 2, v end
  v = rawget(t, 'double')
  if type(v) == 'number' then return 3, v end
  v = rawget(t, 'big_number')
  if type(v) == 'string' then return 4, v end
  v = rawget(t, 'verbatim_string')
  if type(v) == 'table' then
    local f, s = rawget(v, 'format'), rawget(v, 'string')
    if type(f) == 'string' and type(s) == 'string' then return 5, s, f end
  end
  v = rawget(t, 'map')
  if type(v) == 'table' then
    local flat, n = {}, 0
    for k, x in next, v do flat[n + 1] = k; flat[n + 2] = x; n = n + 2 end
    return 6, flat, n
  end
  v = rawget(t, 'set')
  if type(v) == 'table' then
    local keys, n = {}, 0
    for k in next, v do n = n + 1; keys[n] = k end
    return 7, keys, n
  end
  local n = 0
  while rawget(t, n + 1) ~= nil do n = n + 1 end
  return 8, t, n
end
local function slice(t, i, j) return unpack(t, i, j) end
local function error_fields(e)
  local m = rawget(e, 'err')
  if type(m) == 'number' then m = tostring(m) end
  return m, rawget(e, 'source'), rawget(e, 'line')
end
local function settable(t, k, v) t[k] = v end
-- luaL_where(1) as seen from a Python callable: 1 = this, 2 = the callable, 3 = its caller
local function where()
  local i = getinfo(3, 'Sl')
  if i and i.what ~= 'C' and i.currentline > 0 then return i.short_src .. ':' .. i.currentline .. ': ' end
  return ''
end

return {run = run, run_va = run_va, compile = compile, classify = classify, slice = slice,
        load_library = load_library, error_fields = error_fields, settable = settable,
        null = null, where = where}
"""
