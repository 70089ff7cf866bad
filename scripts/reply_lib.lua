-- othertype reports whether v, what redis.pcall returned, is the error of
-- a command run on a value of another type (WRONGTYPE): data the scripts
-- did not write, which they drop or pass over. Any other error (a command
-- the user's ACL refuses, out of memory...) is raised, failing the script
-- as redis.call would: read as a value of another type, a GET the ACL
-- refused made every read of the guard drop the key's names and load it,
-- on every node, and a lock's release leave the lock held.
local function othertype(v)
  if type(v) ~= 'table' or not v.err then
    return false
  end
  if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
    return true
  end
  return error(v)
end
