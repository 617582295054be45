package redlock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleClient_Check() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Check the nodes against the algorithm's assumptions, before taking
	// locks on them: at start-up, or from a health check.
	report, err := c.Check(context.Background())
	if err != nil {
		log.Fatal(err) // only ErrClosed, or ctx done
	}
	// fmt.Print(report) renders a table of the nodes and every finding with
	// its fix. These in-process nodes have no ROLE, INFO server or CONFIG,
	// so those checks are info findings that say they could not read the
	// setting, and persistence, which must be proven, is a warning.
	count := map[redlock.Severity]int{}
	for _, f := range report.Findings {
		count[f.Severity]++
		if f.Severity >= redlock.SeverityWarning {
			fmt.Printf("%s: node %d: %s\n", f.Severity, f.Node, f.Check)
		}
	}
	fmt.Println("worst:", report.Worst())
	fmt.Println("passed:", count[redlock.SeverityOK], "info:", count[redlock.SeverityInfo])

	// Output:
	// warning: node 0: persistence
	// warning: node 1: persistence
	// warning: node 2: persistence
	// warning: node 3: persistence
	// warning: node 4: persistence
	// worst: warning
	// passed: 23 info: 20
}

// Report.Worst suits a start-up gate or a health check: refuse to run on a
// deployment with a critical finding, and log the rest.
func ExampleReport_Worst() {
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
	switch w := report.Worst(); {
	case w >= redlock.SeverityCritical:
		log.Fatalf("redlock deployment unsafe:\n%s", report)
	case w >= redlock.SeverityWarning:
		fmt.Println("starting, with warnings:", w)
	default:
		fmt.Println("starting")
	}
	// Output:
	// starting, with warnings: warning
}
