package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// claimStatesConsistent checks one scrape: every claim of dra_claim_info
// is in exactly one state of dra_claim_status. It returns how many claims
// it checked (0 for an exporter without the families).
func claimStatesConsistent(body []byte) (int, error) {
	states := map[string]int{}
	var claims []string
	key := func(line []byte) string {
		return labelValue(line, "namespace") + "/" + labelValue(line, "claim")
	}
	for _, line := range bytes.Split(body, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("dra_claim_status{")) && bytes.HasSuffix(line, []byte("} 1")):
			states[key(line)]++
		case bytes.HasPrefix(line, []byte("dra_claim_info{")):
			claims = append(claims, key(line))
		}
	}
	for _, c := range claims {
		if states[c] != 1 {
			return len(claims), fmt.Errorf("claim %s in %d states", c, states[c])
		}
	}
	return len(claims), nil
}

// labelValue returns a label's value in an exposition line (values here
// have no escaped quotes).
func labelValue(line []byte, name string) string {
	i := bytes.Index(line, []byte(name+`="`))
	for i > 0 && line[i-1] != '{' && line[i-1] != ',' {
		j := bytes.Index(line[i+1:], []byte(name+`="`))
		if j < 0 {
			return ""
		}
		i += 1 + j
	}
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// countSeries counts the sample lines of a text exposition.
func countSeries(body []byte) int {
	n := 0
	for line := range bytes.Lines(body) {
		if len(line) > 1 && line[0] != '#' {
			n++
		}
	}
	return n
}

// countFamily counts the samples of one family.
func countFamily(body []byte, family string) int {
	n := 0
	for line := range bytes.Lines(body) {
		if rest, ok := bytes.CutPrefix(line, []byte(family)); ok && len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ') {
			n++
		}
	}
	return n
}

// sampleValue returns the value of an unlabelled sample, or 0.
func sampleValue(body []byte, name string) float64 {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}
