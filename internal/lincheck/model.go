package lincheck

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// spec is a sequential specification of one key, with state S; model
// turns it into a porcupine.Model that checks each key on its own.
type spec[S any] struct {
	// init is a key's state before its first operation.
	init func(key string) S
	// step applies c with outcome out (never not-accepted or failed:
	// those have no effect, and model accepts them anywhere) and reports
	// whether the model allows that outcome.
	step  func(s S, c Call, out Outcome) (bool, S)
	equal func(a, b S) bool
	show  func(s S) string
	// expand, when set, rewrites a key's operations before the check
	// (the stock model's two-phase confirm).
	expand func(ops []porcupine.Operation) []porcupine.Operation
}

// model is sp as a porcupine.Model. A key's state is nil until its first
// operation is placed, which sets it from init: porcupine's Init knows no
// key.
func (sp spec[S]) model() porcupine.Model {
	state := func(st any, key string) S {
		if st == nil {
			return sp.init(key)
		}
		return st.(S)
	}
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			parts := byKey(h)
			if sp.expand != nil {
				for i := range parts {
					parts[i] = sp.expand(parts[i])
				}
			}
			return parts
		},
		Init: func() any { return nil },
		Step: func(st, in, out any) (bool, any) {
			c, o := in.(Call), out.(Outcome)
			s := state(st, c.Key)
			if o.Status == StatusNotAccepted || o.Status == StatusFailed {
				return true, s
			}
			return sp.step(s, c, o)
		},
		Equal: func(a, b any) bool {
			if a == nil || b == nil {
				return a == nil && b == nil
			}
			return sp.equal(a.(S), b.(S))
		},
		DescribeOperation: func(in, out any) string {
			return fmt.Sprintf("%v → %v", in.(Call).Op, out.(Outcome))
		},
		DescribeState: func(st any) string {
			if st == nil {
				return "initial"
			}
			return sp.show(st.(S))
		},
	}
}

// byKey splits a history by key, keys in the order they first appear (so
// that two calls on one history partition it alike).
func byKey(h []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range h {
		k := op.Input.(Call).Key
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}
