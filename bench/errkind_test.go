package main

import (
	"errors"
	"testing"
)

func TestNormaliseErr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`read tcp 127.0.0.1:51234->127.0.0.1:6379: i/o timeout`, `read tcp ADDR->ADDR: i/o timeout`},
		{`lock "b:redlock:32:0:13": 2/5 yes`, `lock "…": N/N yes`},
		{`redis: connection pool timeout`, `redis: connection pool timeout`},
	} {
		if got := normaliseErr(c.in); got != c.want {
			t.Errorf("normaliseErr(%q): got %q, want %q", c.in, got, c.want)
		}
	}
	if got, want := errKind(errors.New(`floor: not acquired`)), `floor: not acquired`; got != want {
		t.Errorf("errKind: got %q, want %q", got, want)
	}
}
