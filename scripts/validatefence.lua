-- validatefence.lua: being written.
return 0
