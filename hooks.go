package redlock

// testHooks are the switches of the negative controls: each one turns off
// a safety mechanism, so that a test can show what the mechanism prevents.
// They are not settings a user can reach: only the package's tests set
// them, through export_test.go, before the Client's first call. The zero
// value, which every Client built by New has, turns nothing off.
type testHooks struct {
	// noFenceWriteBack skips the fence write-back, to show that the fence
	// can go backwards without it.
	noFenceWriteBack bool
	// sharedValue makes every attempt of an acquisition write the same
	// value, as before attempts had values of their own; the chaos suite's
	// late-delivery control uses it to show the overlap that a late
	// rollback then causes.
	sharedValue bool
	// unsafeRetries acquires with a plain SET NX, which answers no to its
	// own retry, and counts a release that finds the key gone as a no; the
	// lost-replies control uses it to show what go-redis's retries then
	// leave behind.
	unsafeRetries bool
	// majoritySemaphore gives a semaphore the lock's majority quorum
	// instead of semaphoreQuorum's; the semaphore's negative control uses
	// it to show more than k holders at once.
	majoritySemaphore bool
	// timerOnlyExpiry leaves a lock's end past Until to its expiry timer:
	// Done and Err no longer check Until themselves. The paused-holder
	// control uses it to show a holder that resumes before the runtime
	// runs its overdue timer and finds its lock still "held".
	timerOnlyExpiry bool
	// noWriterPref makes readers ignore waiting writers; the
	// writer-preference benchmark compares against it.
	noWriterPref bool
	// readerQuorum, when set, replaces a reader's majority quorum; the
	// read-write chaos control uses a minority to show a writer beside
	// readers.
	readerQuorum int
	// ticketOf, when set, replaces the ticket a fair call drew (the
	// largest of a quorum's answers); the fair lock's negative control
	// uses it to show the queue out of order when tickets do not increase.
	ticketOf func(drawn int64) int64
	// fairSent, when set, is called each time attempt n of the fair call
	// id is sent to a node with its ticket (fairAcquireArgs), on the
	// goroutine that sends it. It switches nothing off: each such attempt
	// refreshes the call's entry in the queue, and the chaos mix times the
	// refreshes by it, to excuse a FIFO inversion behind a waiter whose
	// entry may have expired (history.FIFOInversions).
	fairSent func(id string, n int)
}
