// Command chatbench measures chatpulse on this machine:
//
//	chatbench ingest   events/s of chatpulse's ingest beside a raw NATS subscriber, and replay speed
//	chatbench check    latency of throttle checks over NATS and HTTP at a steady rate, while events flow
//	chatbench fanout   websocket delivery lag and cost per client with thousands of dashboards, beside Centrifugo
//	chatbench stall    a fresh dashboard's first view while thousands of hostile connections watch nonexistent rooms, and leave
//	chatbench crowd    a fresh dashboard's first view and /healthz while thousands of dashboards are held and events flow
//	chatbench group    CPU per event of a group of members beside one standalone instance, failover, view latency
//	chatbench restart  time to ready after a restart with a snapshot, beside a full replay of the stream
//	chatbench cpu      CPU per event at chat's pace (1 ms ticks), from outside, beside a bare subscriber process
//	chatbench decide   rate-limit decisions per second and per CPU-second, read-only and consuming, beside gubernator
//	chatbench burst    how many of a flood bot's burst get through, checks read-only and consuming, standalone and a group
//	chatbench dendrite time from a Matrix client's send to the message in chatpulse's room view, against a real Dendrite
//	chatbench synapse  consuming checks per CPU-second asked as Synapse asks (filed on the stream), beside the plain check
//	chatbench react    time from a flood's crossing message to the homeserver's mute, and what of the flood stays readable, against a real Dendrite
//
// ingest runs everything in process; check, fanout and stall drive a chatpulse
// that is already running (go run ./cmd/chatpulse), as clients would.
package main

import (
	"fmt"
	"os"
)

func main() {
	cmds := map[string]func([]string) error{"ingest": ingestCmd, "check": checkCmd, "fanout": fanoutCmd, "stall": stallCmd, "crowd": crowdCmd, "group": groupCmd, "restart": restartCmd, "cpu": cpuCmd, "burst": burstCmd, "decide": decideCmd, "dendrite": dendriteCmd, "react": reactCmd, "synapse": synapseCmd, "bare-sub": bareSubCmd, "bare-feed": bareFeedCmd, "crowd-hold": crowdHoldCmd}
	if len(os.Args) < 2 || cmds[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: chatbench ingest|check|fanout|stall|crowd|group|restart|cpu|burst|decide|dendrite|react|synapse [flags]   (chatbench <cmd> -h for the flags)")
		os.Exit(2)
	}
	if err := cmds[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(1)
	}
}
