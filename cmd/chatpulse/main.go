// Command chatpulse counts chat traffic from NATS in rolling windows, serves
// the live views over HTTP, websocket and a dashboard, and answers
// moderation throttle checks. With no flags it runs an embedded NATS server
// with JetStream and needs nothing else.
//
// main only wires signals to Main; tests build the same Main.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:], os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "chatpulse:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chatpulse:", err)
		m.Close()
		var usage *UsageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	<-ctx.Done()
	stop() // a second signal ends the process at once
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "chatpulse:", err)
		os.Exit(1)
	}
}
