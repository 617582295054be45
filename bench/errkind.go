package main

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/redlockgo/redlock"
)

// errKind names the kind of a failed call, so that the report can count
// errors by kind rather than list thousands that differ only in a key, an
// address or a count. For the library's QuorumError it is the sentinel, the
// reason, and the set of causes of the nodes that failed, plus "no" when a
// node answered no: "redlock: not held: could not confirm the release on a
// quorum [node failed: redlock: no answer within the node timeout]". Any
// other error is its text with quoted strings, addresses and numbers
// replaced.
func errKind(err error) string {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return normaliseErr(err.Error())
	}
	var b strings.Builder
	switch {
	case errors.Is(err, redlock.ErrNotHeld):
		b.WriteString(redlock.ErrNotHeld.Error())
	case errors.Is(err, redlock.ErrNotAcquired):
		b.WriteString(redlock.ErrNotAcquired.Error())
	default:
		b.WriteString("redlock: quorum error")
	}
	if qe.Reason != "" {
		b.WriteString(": " + qe.Reason)
	}
	var causes []string
	for _, v := range qe.Stats.Nodes {
		var c string
		switch v.Vote {
		case redlock.VoteNo:
			c = "node answered no"
		case redlock.VoteFailed:
			c = "node failed: " + normaliseErr(errText(v.Err))
		default:
			continue
		}
		if !slices.Contains(causes, c) {
			causes = append(causes, c)
		}
	}
	slices.Sort(causes)
	if len(causes) > 0 {
		b.WriteString(" [" + strings.Join(causes, "; ") + "]")
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		b.WriteString("; " + context.DeadlineExceeded.Error())
	case errors.Is(err, context.Canceled):
		b.WriteString("; " + context.Canceled.Error())
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

var (
	quotedRE = regexp.MustCompile(`"[^"]*"`)
	addrRE   = regexp.MustCompile(`\[?[0-9a-fA-F.:]*[0-9]\]?:[0-9]+`)
	numberRE = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
)

// normaliseErr replaces the parts of an error text that vary from one call
// to the next: quoted strings (keys), addresses and numbers.
func normaliseErr(s string) string {
	s = quotedRE.ReplaceAllString(s, `"…"`)
	s = addrRE.ReplaceAllString(s, "ADDR")
	return numberRE.ReplaceAllString(s, "N")
}
