package redlock

// This file gives the package's tests the switches production code keeps
// out of a Client's options, as net/http's export_test.go does.

// setHooks sets c's test hooks, the negative controls' switches, and
// returns c. Call it before c's first call: the hooks are read without
// locking.
func setHooks(c *Client, h testHooks) *Client {
	c.hooks = h
	return c
}
