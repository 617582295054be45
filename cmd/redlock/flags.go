package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// waitFlag is the value of -wait, -timeout and -w. Not given, run waits as
// long as it takes; 0 tries once, as flock(1) -w 0 does; otherwise it waits
// up to d.
type waitFlag struct {
	d   time.Duration
	set bool
}

// Set accepts seconds, as flock(1) does ("5", "0.5"), or a Go duration
// ("90s", "2m").
func (w *waitFlag) Set(s string) error {
	d, err := parseSeconds(s)
	if err != nil {
		return err
	}
	w.d, w.set = d, true
	return nil
}

// String is "" until the flag is set, so that the help shows no default.
func (w *waitFlag) String() string {
	if w == nil || !w.set {
		return ""
	}
	return w.d.String()
}

// parseSeconds parses a number of seconds or a Go duration that is not
// negative.
func parseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f*float64(time.Second) > math.MaxInt64 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, errors.New("want seconds (5, 0.5) or a duration (90s, 2m)")
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", s)
	}
	return d, nil
}
