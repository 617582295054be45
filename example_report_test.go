package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redlockgo/redlock"
)

// Report.String renders the whole report for a log or a terminal: a table
// of the nodes, then every finding that is not OK, each with its fix.
func ExampleReport_String() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	report, err := c.Check(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	text := report.String()
	// The addresses and round trips differ from run to run: show the shape.
	fmt.Println("names every node:", strings.Count(text, "127.0.0.1:") >= len(clients))
	fmt.Println("says how to fix persistence:", strings.Contains(text, "appendonly"))
	// Output:
	// names every node: true
	// says how to fix persistence: true
}

// Each NodeInfo is what Check read from one node; a node that could not be
// read has Err set and the other fields zero.
func ExampleNodeInfo() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	report, err := c.Check(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range report.Nodes {
		fmt.Printf("node %d: answered %t, clock within a second %t\n",
			n.Index, n.Err == nil, n.ClockOffset.Abs() < time.Second)
	}
	// Output:
	// node 0: answered true, clock within a second true
	// node 1: answered true, clock within a second true
	// node 2: answered true, clock within a second true
	// node 3: answered true, clock within a second true
	// node 4: answered true, clock within a second true
}

// A Finding names the check, the node (-1 for the deployment as a whole),
// what was found and the fix. Severity orders them: OK, info, warning,
// critical.
func ExampleFinding() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	report, err := c.Check(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range report.Findings {
		if f.Check == "persistence" && f.Node == 0 {
			fmt.Println(f.Severity, f.Check, "fix given:", f.Fix != "")
		}
		if f.Check == "scripting" && f.Node == 0 {
			fmt.Println(f.Severity, f.Check, "fix given:", f.Fix != "")
		}
	}
	for s := redlock.SeverityOK; s <= redlock.SeverityCritical; s++ {
		fmt.Print(s, " ")
	}
	fmt.Println()
	// Output:
	// warning persistence fix given: true
	// ok scripting fix given: false
	// ok info warning critical
}

// Holding is the verdict of the quorum; its Nodes say what each node holds.
// Here a node lost the key (as a restart without persistence loses it): the
// lock is still held, by the other four.
func ExampleHolding() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.TryLock(ctx, "invoice-42", redlock.WithLabel("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	// TryLock returns once a quorum answered: wait for the others.
	for _, rc := range clients {
		for rc.Exists(ctx, "invoice-42").Val() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := clients[2].Del(ctx, "invoice-42").Err(); err != nil {
		log.Fatal(err)
	}

	h, err := c.Inspect(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held %t by %q, quorum %d\n", h.Held, h.Label, h.Quorum)
	for _, n := range h.Nodes {
		fmt.Printf("node %d: held %t layout %q ttl set %t\n", n.Index, n.Held, n.Layout, n.PTTL > 0)
	}
	// Output:
	// held true by "worker-7", quorum 3
	// node 0: held true layout "plain" ttl set true
	// node 1: held true layout "plain" ttl set true
	// node 2: held false layout "" ttl set false
	// node 3: held true layout "plain" ttl set true
	// node 4: held true layout "plain" ttl set true
}

// NodeHolding shows what one node holds: here an owner lock taken twice,
// and its hold count on that node.
func ExampleNodeHolding() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// The same owner takes the lock twice (reentrancy).
	for range 2 {
		l, err := c.TryLock(ctx, "ledger", redlock.WithOwner("job-9"))
		if err != nil {
			log.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	// TryLock returns at its quorum; wait until the slowest node has
	// counted both holds too, so that node 0's line is the same every run.
	var h *redlock.Holding
	for {
		if h, err = c.Inspect(ctx, "ledger"); err != nil {
			log.Fatal(err)
		}
		settled := true
		for _, n := range h.Nodes {
			settled = settled && n.Count == 2
		}
		if settled {
			break
		}
		time.Sleep(time.Millisecond)
	}
	n := h.Nodes[0]
	fmt.Printf("node 0: layout %q owner %q count %d\n", n.Layout, n.Owner, n.Count)
	fmt.Printf("quorum: owner %q count %d\n", h.Owner, h.Count)
	// Output:
	// node 0: layout "owner" owner "job-9" count 2
	// quorum: owner "job-9" count 2
}

// A label longer than MaxLabelLen bytes is refused, before anything is
// sent.
func ExampleMaxLabelLen() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.TryLock(context.Background(), "k", redlock.WithLabel(strings.Repeat("x", redlock.MaxLabelLen+1)))
	fmt.Println(errors.Is(err, redlock.ErrInvalidOption))
	// Output:
	// true
}
