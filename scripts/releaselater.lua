-- releaselater.lua: being written.
return 0
