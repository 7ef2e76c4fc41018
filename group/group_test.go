package group

import "testing"

// Partition agrees with what nats-server's transform filed chat.lobby.alice
// under, checked by hand against v2.15.2: chatp.19.39.lobby.alice.
func TestPartition(t *testing.T) {
	if p := Partition("lobby", 64); p != 19 {
		t.Errorf("lobby: %d", p)
	}
	if p := Partition("alice", 64); p != 39 {
		t.Errorf("alice: %d", p)
	}
}
