package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/throttle"
)

// policyPoll is how often a policies file is read to see whether it
// changed. Reading it whole (a few kilobytes) and comparing a hash sees
// every change, including an editor's save by rename and a change within
// the mtime's granularity, which a look at mtime and size could miss.
const policyPoll = time.Second

// loadPolicies reads the policies in force at start: the defaults, or the
// file's (build, before NATS is there); the key's come in kvPolicies.
func loadPolicies(src policySource) ([]throttle.Policy, error) {
	if src.name == "" || src.kv() {
		return throttle.DefaultPolicies(), nil
	}
	ps, err := throttle.LoadPolicies(src.name)
	if err != nil {
		return nil, &UsageError{fmt.Errorf("--policies: %w", err)}
	}
	return ps, nil
}

// kvPolicies reads the policies of a kv: source once NATS is there, and
// puts them in force before anything is counted, restored or joined: the
// snapshots are then labelled with them.
func (m *Main) kvPolicies(ctx context.Context) error {
	src := m.policies.source
	if !src.kv() {
		return nil
	}
	v, err := m.bus.Get(ctx, src.bucket, src.key)
	if errors.Is(err, bus.ErrNoKey) {
		return &UsageError{err}
	}
	if err != nil {
		return err
	}
	ps, err := throttle.ParsePolicies(src.name, v.Data)
	if err == nil {
		err = m.engine.Reconfigure(ps)
	}
	if err != nil {
		return usagef("--policies %s: %v", src.name, err)
	}
	m.policies.mu.Lock()
	defer m.policies.mu.Unlock()
	m.policies.set(ps)
	return nil
}

// onSIGHUP calls f, on a goroutine of its own, on every SIGHUP until
// chatpulse stops: the signal is caught from the moment it returns (each
// caller hears every signal).
func (m *Main) onSIGHUP(f func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // never the default, which ends the process
	m.goRun(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-m.stop:
				return
			case <-hup:
				f()
			}
		}
	})
}

// watchPolicies offers every new version of the policies source until
// chatpulse stops: a key's as the watch delivers them, a file's on SIGHUP
// and when it changes.
func (m *Main) watchPolicies() error {
	src := m.policies.source
	if src.name == "" || src.kv() {
		m.onSIGHUP(func() { m.Log.Info("SIGHUP: no policies file to read again", "policies", src.shown()) })
	}
	switch {
	case src.kv():
		ctx, cancel := context.WithCancel(context.Background())
		m.goRun(func() { <-m.stop; cancel() })
		return m.bus.Watch(ctx, src.bucket, src.key, func(v bus.Value) {
			if v.Deleted {
				m.policies.refused(errors.New(src.name + ": the key was deleted"))
				return
			}
			m.policies.offer(v.Data) // the first is the version in force: no change
		})
	case src.name != "":
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		m.goRun(func() {
			defer signal.Stop(hup)
			m.watchFile(src.name, hup)
		})
	}
	return nil
}

// watchFile offers the file's content on every SIGHUP, and whenever it
// differs from what it was at the last look.
func (m *Main) watchFile(path string, hup <-chan os.Signal) {
	seen := version(os.ReadFile(path))
	var poll <-chan time.Time // nil: on SIGHUP only
	if m.policyPoll > 0 {
		t := time.NewTicker(m.policyPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		force := false
		select {
		case <-m.stop:
			return
		case <-hup:
			force = true
		case <-poll:
		}
		data, err := os.ReadFile(path)
		v := version(data, err)
		if v == seen && !force {
			m.policyUnchanged.Add(1)
			continue
		}
		seen = v
		if err != nil {
			m.policies.refused(err) // a file gone, or unreadable: the policies in force stay
			continue
		}
		m.policies.offer(data)
	}
}

// version tells one content of a file from another, or from an error.
func version(data []byte, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	h := sha256.Sum256(data)
	return string(h[:])
}
