package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/nodegate"
)

func referenceDefs(t *testing.T) []*family.Def {
	t.Helper()
	defs, err := allDefs()
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// TestMetricsReferenceIsFresh fails when docs/metrics.md does not match what
// the code registers; `make docs` rewrites it.
func TestMetricsReferenceIsFresh(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run([]string{"docs"}, &out, &errOut); rc != 0 {
		t.Fatalf("docs exited %d: %s", rc, errOut.String())
	}
	committed, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), committed) {
		t.Error("docs/metrics.md is stale: run `make docs` and commit the result")
	}
}

// TestHelpIsOneShortSentence keeps HELP lines what tooltips can show: one
// sentence, no longer than 120 characters. Guidance goes to Def.Doc, which
// the metrics reference prints.
func TestHelpIsOneShortSentence(t *testing.T) {
	defs := referenceDefs(t)
	if len(defs) < 10 {
		t.Fatalf("only %d families", len(defs))
	}
	for _, d := range defs {
		h := d.Help
		switch {
		case len(h) > 120:
			t.Errorf("%s: HELP is %d characters (at most 120): %q", d.Name, len(h), h)
		case !strings.HasSuffix(h, "."):
			t.Errorf("%s: HELP does not end with a full stop: %q", d.Name, h)
		case strings.Contains(strings.TrimSuffix(h, "."), ". "):
			t.Errorf("%s: HELP has more than one sentence: %q", d.Name, h)
		}
	}
}

// TestGateReasonsDocumented: every reason a gate or a control can give,
// in the code and in rules/gates.yaml, has one row in the table of
// docs/metrics.md (Gate reasons), and no row names a reason that none
// gives.
func TestGateReasonsDocumented(t *testing.T) {
	rules, err := os.ReadFile("../../rules/gates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The reasons each recorded gate's label_replace writes.
	ruleReasons := func(record string) []string {
		text := string(rules)
		i := strings.Index(text, "- record: "+record+"\n")
		if i < 0 {
			t.Fatalf("rules/gates.yaml has no rule %s", record)
		}
		text = text[i+len(record)+11:]
		if j := strings.Index(text, "- record: "); j >= 0 {
			text = text[:j]
		}
		var out []string
		for _, m := range regexp.MustCompile(`"reason", "([a-z_]+)"`).FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	want := map[string][]string{
		"api":      append(append([]string{}, classify.APIGateReasons...), ruleReasons("namespace_pod_gate:dra_pod_gate:status")...),
		"node":     append(nodegate.Reasons, ruleReasons("namespace_pod:dra_pod_gate_node:status")...),
		"workload": append(workloadGateReasons, ruleReasons("namespace_pod:dra_pod_gate_workload:status")...),
		"control":  classify.ControlReasons,
		"any":      {gateAbsent},
	}
	if got := ruleReasons("namespace_pod:dra_pod_gate_node:status"); !slices.Equal(got, nodegate.Reasons) {
		t.Errorf("the node gate rule gives %v, gates --from %v: the lists drifted", got, nodegate.Reasons)
	}
	if got := ruleReasons("namespace_pod:dra_pod_gate_workload:status"); !slices.Equal(got, workloadGateReasons) {
		t.Errorf("the workload gate rule gives %v, the code lists %v", got, workloadGateReasons)
	}
	rows := map[string]int{}
	for _, d := range gateReasonDocs() {
		rows[d.gate+" "+d.reason]++
		if d.meaning == "" || d.fix == "" || strings.HasPrefix(d.fix, " ") {
			t.Errorf("row %s %s lacks its meaning or its fix: %+v", d.gate, d.reason, d)
		}
	}
	known := map[string]bool{}
	for gate, reasons := range want {
		for _, r := range reasons {
			known[gate+" "+r] = true
			if rows[gate+" "+r] != 1 {
				t.Errorf("gate %s reason %s has %d rows in the Gate reasons table, want 1 (gatereasons.go)", gate, r, rows[gate+" "+r])
			}
		}
	}
	for row := range rows {
		if !known[row] {
			t.Errorf("the table documents %s, which no gate gives", row)
		}
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), renderGateReasons()) {
		t.Error("docs/metrics.md lacks the current Gate reasons table: run `make docs`")
	}
}
