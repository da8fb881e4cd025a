"""``cjson`` for scripts, written in Lua: lua-cjson 2.1's output and error texts.

Pure Lua (string.format/gsub/find do the heavy lifting in C) so encoding a table never crosses into
Python, keys come out in Lua's own ``next`` order (as Redis's), and ``cjson.null`` is a userdata
sentinel like Redis's lightuserdata NULL. Errors are raised (by the Python entry points ``wrap``
makes) at the caller's position, so they read ``user_script:1: Cannot serialise ...`` as in Redis.
"""

CJSON = r"""
local null, wrap = ...
local type, tostring, tonumber, error, pcall, next, rawget, select = type, tostring, tonumber, error, pcall, next, rawget, select
local format, char, sub, find, gsub, lower, concat = string.format, string.char, string.sub, string.find, string.gsub, string.lower, table.concat
local floor, huge = math.floor, math.huge

local function new()
local cfg = {encode_max_depth = 1000, decode_max_depth = 1000, precision = 14,
  sparse_convert = false, sparse_ratio = 2, sparse_safe = 10, encode_invalid = false,
  decode_invalid = true, keep_buffer = true}

local escapes = {}
for i = 0, 31 do escapes[char(i)] = format('\\u%04x', i) end
escapes['\b'] = '\\b'; escapes['\t'] = '\\t'; escapes['\n'] = '\\n'
escapes['\f'] = '\\f'; escapes['\r'] = '\\r'; escapes['"'] = '\\"'
escapes['\\'] = '\\\\'; escapes['/'] = '\\/'; escapes['\127'] = '\\u007f'

local function fail(msg) error(msg, 0) end
local function enc_error(v, reason) fail('Cannot serialise ' .. type(v) .. ': ' .. reason) end

local function enc_number(n)
  if n ~= n or n == huge or n == -huge then
    if not cfg.encode_invalid then enc_error(n, 'must not be NaN or Inf') end
    if n ~= n then return 'nan' end
    return n > 0 and 'inf' or '-inf'
  end
  return format('%.' .. cfg.precision .. 'g', n)
end
local function enc_string(s) return '"' .. gsub(s, '[%c"\\/\127]', escapes) .. '"' end

local encode_value
local function array_length(t)
  local max, items = 0, 0
  for k in next, t do
    if type(k) == 'number' and k >= 1 and floor(k) == k then
      if k > max then max = k end
      items = items + 1
    else
      return -1
    end
  end
  if cfg.sparse_ratio > 0 and max > items * cfg.sparse_ratio and max > cfg.sparse_safe then
    if not cfg.sparse_convert then enc_error(t, 'excessively sparse array') end
    return -1
  end
  return max
end
local function enc_table(t, depth, out)
  depth = depth + 1
  if depth > cfg.encode_max_depth then fail('Cannot serialise, excessive nesting (' .. depth .. ')') end
  local len = array_length(t)
  if len > 0 then
    out[#out + 1] = '['
    for i = 1, len do
      if i > 1 then out[#out + 1] = ',' end
      encode_value(rawget(t, i), depth, out)
    end
    out[#out + 1] = ']'
    return
  end
  out[#out + 1] = '{'
  local first = true
  for k, v in next, t do
    if not first then out[#out + 1] = ',' end
    first = false
    local kt = type(k)
    if kt == 'string' then out[#out + 1] = enc_string(k)
    elseif kt == 'number' then out[#out + 1] = '"' .. enc_number(k) .. '"'
    else enc_error(k, 'table key must be a number or string') end
    out[#out + 1] = ':'
    encode_value(v, depth, out)
  end
  out[#out + 1] = '}'
end
encode_value = function(v, depth, out)
  local t = type(v)
  if t == 'string' then out[#out + 1] = enc_string(v)
  elseif t == 'number' then out[#out + 1] = enc_number(v)
  elseif t == 'boolean' then out[#out + 1] = v and 'true' or 'false'
  elseif t == 'table' then enc_table(v, depth, out)
  elseif t == 'nil' or v == null then out[#out + 1] = 'null'
  else enc_error(v, 'type not supported') end
end

-- encode and decode return (true, result) or (false, message); ``wrap`` (a Python callable
-- factory) turns them into entry points that raise the message at the caller's position
local function encode(...)
  if select('#', ...) ~= 1 then return false, "bad argument #1 to 'encode' (expected 1 argument)" end
  local v = ...
  local out = {}
  local ok, err = pcall(encode_value, v, 0, out)
  if not ok then return false, err end
  return true, concat(out)
end

-- decoding ------------------------------------------------------------------------------------
local TOKEN_NAMES = {['{'] = 'T_OBJ_BEGIN', ['}'] = 'T_OBJ_END', ['['] = 'T_ARR_BEGIN',
  [']'] = 'T_ARR_END', [':'] = 'T_COLON', [','] = 'T_COMMA'}
local ESC = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t'}

local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

local function number_token(s, pos)
  local _, last = find(s, '^[%w%.%+%-]*', pos)
  for j = last, pos, -1 do
    local n = tonumber(sub(s, pos, j))
    if n ~= nil then return 'value', n, pos, j + 1 end
  end
  return 'error', 'invalid number', pos, pos
end

-- a token: kind ('value', a TOKEN_NAMES key, 'end' or 'error'), value, start index (1-based)
local function next_token(s, pos)
  local _, e = find(s, '^[ \t\n\r]*', pos)
  pos = e + 1
  local c = sub(s, pos, pos)
  if c == '' then return 'end', nil, pos, pos end
  if TOKEN_NAMES[c] then return c, nil, pos, pos + 1 end
  if c == '"' then
    local parts, i = {}, pos + 1
    while true do
      local a = find(s, '["\\]', i)
      if a == nil then return 'error', 'unexpected end of string', #s + 1, #s + 1 end
      parts[#parts + 1] = sub(s, i, a - 1)
      if sub(s, a, a) == '"' then return 'value', concat(parts), pos, a + 1 end
      local esc = sub(s, a + 1, a + 1)
      if esc == 'u' then
        local hex = sub(s, a + 2, a + 5)
        local cp = #hex == 4 and not find(hex, '[^%x]') and tonumber(hex, 16)
        if not cp then return 'error', 'invalid unicode escape code', a, a end
        i = a + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          local lo = sub(s, i, i + 1) == '\\u' and tonumber(sub(s, i + 2, i + 5), 16)
          if not lo or lo < 0xDC00 or lo > 0xDFFF then return 'error', 'invalid unicode escape code', a, a end
          cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
          i = i + 6
        end
        parts[#parts + 1] = utf8(cp)
      elseif ESC[esc] then
        parts[#parts + 1] = ESC[esc]
        i = a + 2
      elseif esc == '' then
        return 'error', 'unexpected end of string', a + 1, a + 1
      else
        return 'error', 'invalid escape code', a, a
      end
    end
  end
  if c == '-' or find(c, '%d') then return number_token(s, pos) end
  if sub(s, pos, pos + 3) == 'true' then return 'value', true, pos, pos + 4 end
  if sub(s, pos, pos + 4) == 'false' then return 'value', false, pos, pos + 5 end
  if sub(s, pos, pos + 3) == 'null' then return 'value', null, pos, pos + 4 end
  local word = lower(sub(s, pos, pos + 2))
  if cfg.decode_invalid and (word == 'inf' or word == 'nan') then return number_token(s, pos) end
  return 'error', 'invalid token', pos, pos
end

local function token_name(kind, value)
  if kind == 'end' then return 'T_END' end
  if kind == 'error' then return value end
  if kind == 'value' then
    local t = type(value)
    if t == 'string' then return 'T_STRING' elseif t == 'number' then return 'T_NUMBER'
    elseif t == 'boolean' then return 'T_BOOLEAN' else return 'T_NULL' end
  end
  return TOKEN_NAMES[kind]
end
local function expected(what, kind, value, at)
  fail('Expected ' .. what .. ' but found ' .. token_name(kind, value) .. ' at character ' .. at)
end

local parse_value
local function parse_object(s, pos, depth)
  local t = {}
  local kind, value, at, nxt = next_token(s, pos)
  if kind == '}' then return t, nxt end
  while true do
    if kind ~= 'value' or type(value) ~= 'string' then expected('object key string', kind, value, at) end
    local key = value
    kind, value, at, nxt = next_token(s, nxt)
    if kind ~= ':' then expected('colon', kind, value, at) end
    t[key], nxt = parse_value(s, nxt, depth)
    kind, value, at, nxt = next_token(s, nxt)
    if kind == '}' then return t, nxt end
    if kind ~= ',' then expected('comma or object end', kind, value, at) end
    kind, value, at, nxt = next_token(s, nxt)
  end
end
local function parse_array(s, pos, depth)
  local t, n = {}, 0
  local kind, value, at, nxt = next_token(s, pos)
  if kind == ']' then return t, nxt end
  local cur = at
  while true do
    n = n + 1
    t[n], nxt = parse_value(s, cur, depth)
    kind, value, at, nxt = next_token(s, nxt)
    if kind == ']' then return t, nxt end
    if kind ~= ',' then expected('comma or array end', kind, value, at) end
    cur = nxt
  end
end
parse_value = function(s, pos, depth)
  local kind, value, at, nxt = next_token(s, pos)
  if kind == 'value' then return value, nxt end
  if kind == '{' or kind == '[' then
    depth = depth + 1
    if depth > cfg.decode_max_depth then
      fail('Found too many nested data structures (' .. depth .. ') at character ' .. at)
    end
    if kind == '{' then return parse_object(s, nxt, depth) end
    return parse_array(s, nxt, depth)
  end
  expected('value', kind, value, at)
end
local function decode_all(s)
  local v, pos = parse_value(s, 1, 0)
  local kind, value, at = next_token(s, pos)
  if kind ~= 'end' then expected('the end', kind, value, at) end
  return v
end
local function decode(...)
  if select('#', ...) ~= 1 then return false, "bad argument #1 to 'decode' (expected 1 argument)" end
  local s = ...
  if type(s) == 'number' then s = tostring(s) end
  if type(s) ~= 'string' then return false, "bad argument #1 to 'decode' (string expected, got " .. type(s) .. ")" end
  return pcall(decode_all, s)
end

-- configuration, as lua-cjson's setters: each returns the current setting
local function setting(name, lo, hi)
  return function(v)
    if v ~= nil then
      v = tonumber(v)
      if v == nil or v < lo or v > hi then error("bad argument #1 to '" .. name .. "' (expected integer between " .. lo .. " and " .. hi .. ")", 2) end
      cfg[name] = floor(v)
    end
    return cfg[name]
  end
end
local function flag(name)
  return function(v)
    if v ~= nil then cfg[name] = (v == true or v == 1 or v == 'on') end
    return cfg[name]
  end
end
local max_depth = setting('encode_max_depth', 1, 2147483647)
local dec_depth = setting('decode_max_depth', 1, 2147483647)
local precision = setting('precision', 1, 14)
return {
  encode = wrap(encode), decode = wrap(decode), null = null, _NAME = 'cjson', _VERSION = '2.1.0', new = new,
  encode_max_depth = max_depth, decode_max_depth = dec_depth, encode_number_precision = precision,
  encode_keep_buffer = flag('keep_buffer'), encode_invalid_numbers = flag('encode_invalid'),
  decode_invalid_numbers = flag('decode_invalid'),
  encode_sparse_array = function(convert, ratio, safe)
    if convert ~= nil then cfg.sparse_convert = (convert == true or convert == 1 or convert == 'on') end
    if ratio ~= nil then cfg.sparse_ratio = tonumber(ratio) or cfg.sparse_ratio end
    if safe ~= nil then cfg.sparse_safe = tonumber(safe) or cfg.sparse_safe end
    return cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe
  end,
}
end
return new()
"""
