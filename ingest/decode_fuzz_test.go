package ingest

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzDecode checks that Decode never panics, agrees with the
// encoding/json reference and never accepts what the contract rejects.
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=60s ./ingest/
//
// Seeds are kept under 4 KiB: the fuzzer spends up to a minute minimizing
// each new interesting input, and a 64 KiB one stalls it for all of that.
// The table tests cover the big payloads.
func FuzzDecode(f *testing.F) {
	add := func(data []byte) {
		if len(data) <= 4096 {
			f.Add(data)
		}
	}
	for _, c := range decodeCases {
		add([]byte(c.in))
	}
	for _, ev := range benchEvents {
		add([]byte(ev.json))
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		add(genPayload(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, data, testNow, testSkew)
	})
}

// FuzzDecodeMatrix holds the Matrix front ends to their reference,
// Dendrite's envelopes and Synapse's checks alike, seeded with the
// events a real Dendrite published (and each as Synapse sends it to be
// checked):
//
//	go test -run='^$' -fuzz=FuzzDecodeMatrix -fuzztime=60s ./ingest/
func FuzzDecodeMatrix(f *testing.F) {
	bases := matrixBases(f)
	for _, data := range bases {
		f.Add(data)
		if bytes.Contains(data, []byte(`"new_room_event":{`)) {
			f.Add(synapseBody(f, data))
		}
	}
	for _, c := range matrixCases {
		if len(c.in) <= 4096 {
			f.Add([]byte(c.in))
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	for range 100 {
		if data := genMatrixPayload(r, bases); len(data) <= 4096 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkMappedAgainstReference(t, matrixMapping, Matrix(), data, matrixNow)
		checkMappedAgainstReference(t, synapseMapping, SynapseEvent(), data, matrixNow)
	})
}

// FuzzDecodeMapping holds the mapping front end to its reference, through
// the test mapping with each unit of ts:
//
//	go test -run='^$' -fuzz=FuzzDecodeMapping -fuzztime=60s ./ingest/
func FuzzDecodeMapping(f *testing.F) {
	formats := testMappings(f)
	for _, c := range mappingCases {
		if len(c.in) <= 4096 {
			f.Add([]byte(c.in), uint8(0))
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 200 {
		u := r.IntN(len(formats))
		f.Add(genMappedPayload(r, testUnits[u]), uint8(u))
	}
	f.Fuzz(func(t *testing.T, data []byte, unit uint8) {
		format := formats[int(unit)%len(formats)]
		checkMappedAgainstReference(t, format.plan.spec, format, data, testNow)
	})
}
