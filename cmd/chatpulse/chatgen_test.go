package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/traffic"
)

// chatgen's own account of what it sent matches what chatpulse counted.
func TestChatgenCounts(t *testing.T) {
	tm := startMain(t)
	bin := filepath.Join(t.TempDir(), "chatgen")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatgen").CombinedOutput(); err != nil {
		t.Fatalf("build chatgen: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--nats-url", tm.PublishURL(), "--rate", "2000", "--duration", "2s",
		"--rooms", "20", "--users", "300", "--bad-ratio", "0.1", "--seed", "5", "--counts")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, testWriter{t}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var sent traffic.Counts
	if err := json.Unmarshal(stdout.Bytes(), &sent); err != nil {
		t.Fatalf("chatgen --counts: %v in %s", err, stdout.Bytes())
	}
	if sent.Sent != 4000 || sent.Bad == 0 || sent.Good+sent.Bad != sent.Sent {
		t.Fatalf("sent: %d good, %d bad of %d", sent.Good, sent.Bad, sent.Sent)
	}
	tm.waitReceived(sent.Sent)

	var rooms aggregator.Rooms
	tm.get("/api/v1/rooms?window=5m&limit=1000", &rooms)
	got := map[string]int{}
	for _, r := range rooms.Rooms {
		got[r.Room] = int(r.Messages)
	}
	if len(got) != len(sent.Rooms) {
		t.Fatalf("%d rooms counted, chatgen sent to %d", len(got), len(sent.Rooms))
	}
	for room, n := range sent.Rooms {
		if got[room] != n {
			t.Errorf("room %s: counted %d, sent %d", room, got[room], n)
		}
	}
	for user, n := range sent.Users {
		var u aggregator.User
		tm.get("/api/v1/users/"+user+"?window=5m", &u)
		if int(u.Messages) != n {
			t.Errorf("user %s: counted %d, sent %d", user, u.Messages, n)
		}
	}
	if got := tm.metric("chatpulse_events_accepted_total"); got != float64(sent.Good) {
		t.Errorf("accepted %v, chatgen sent %d good", got, sent.Good)
	}
}
