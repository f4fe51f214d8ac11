package main

// The gates command's report: per pod each gate PASS or FAIL with its
// evidence and owner, the negative controls, and one verdict. Online and
// offline evaluations fill the same report.

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
)

// Gate states in the report, identifiers in text and JSON alike.
const (
	statePass         = "PASS"
	stateFail         = "FAIL"
	stateNotEvaluated = "NOT_EVALUATED"
)

// The verdict's outcomes. PARTIAL and CANNOT_JUDGE are never a pass: a
// pipeline that promotes on exit 0 promotes only on PASS.
const (
	outcomePass        = "PASS"
	outcomeFail        = "FAIL"
	outcomePartial     = "PARTIAL"
	outcomeCannotJudge = "CANNOT_JUDGE"
)

// gatesExit is the exit status of each outcome.
var gatesExit = map[string]int{
	outcomePass:        gatesPass,
	outcomeFail:        gatesFail,
	outcomePartial:     gatesPartial,
	outcomeCannotJudge: gatesError,
}

type gatesReport struct {
	Namespace string `json:"namespace"`
	Selector  string `json:"selector,omitempty"`
	// Source is the Prometheus URL or the bundle file.
	Source string    `json:"source"`
	At     time.Time `json:"at"`
	// Window and Evaluations: online, the span every gate must have passed
	// and how many evaluations of it were read; offline, none.
	Window      string          `json:"window,omitempty"`
	Evaluations int             `json:"evaluations,omitempty"`
	Pods        []podGates      `json:"pods"`
	Controls    []controlReport `json:"negativeControls"`
	// RequireControl: the verdict needs a negative control that held.
	RequireControl bool          `json:"requireNegativeControl"`
	Verdict        verdictReport `json:"verdict"`
	// cannotJudge says why the evidence cannot be judged (a Prometheus
	// that does not evaluate rules/gates.yaml); empty when it can.
	cannotJudge string
	// noPodHint follows the summary of a namespace without a pod to judge.
	noPodHint string
}

type podGates struct {
	Namespace string       `json:"namespace"`
	Pod       string       `json:"pod"`
	PodUID    string       `json:"podUID"`
	Node      string       `json:"node,omitempty"`
	Gates     []gateReport `json:"gates"`
}

type gateReport struct {
	Gate  string `json:"gate"`
	Owner string `json:"owner"`
	// State is the gate now: PASS, FAIL, or NOT EVALUATED.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// PassedWindow: the gate passed at every evaluation of the window;
	// nil where there was no window (offline).
	PassedWindow *bool `json:"passedWindow,omitempty"`
	// Failed counts the evaluations of the window at which the gate failed
	// or was absent.
	Failed int `json:"failedEvaluations,omitempty"`
	// History says how the window went when it did not pass whole.
	History  string   `json:"history,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

type controlReport struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	// State is HOLDS, BROKEN or INVALID (controlState).
	State string `json:"state"`
	Holds bool   `json:"holds"`
	// HeldWindow: the control held at every evaluation of the window; nil
	// where there was no window (offline).
	HeldWindow *bool  `json:"heldWindow,omitempty"`
	Reason     string `json:"reason"`
	// Why says, for an invalid control, what keeps it from proving the
	// boundary.
	Why      string   `json:"why,omitempty"`
	Claim    string   `json:"claim,omitempty"`
	Node     string   `json:"node,omitempty"`
	Device   string   `json:"device,omitempty"`
	History  string   `json:"history,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

type verdictReport struct {
	// Outcome is PASS, FAIL, PARTIAL (every gate evaluated passed, some
	// could not be evaluated: offline, the workload gate) or CANNOT_JUDGE
	// (the evidence to judge by is missing: no pod, or a Prometheus that
	// does not evaluate rules/gates.yaml). Pass is Outcome == PASS.
	Outcome string `json:"outcome"`
	Pass    bool   `json:"pass"`
	// Gate and Owner name the first failing gate (in the order api, node,
	// workload) and its owner; a failing negative control is the api
	// gate's platform team. PARTIAL and CANNOT_JUDGE name none.
	Gate    string `json:"gate,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Summary string `json:"summary"`
	// Also lists the other causes of a FAIL, most pressing first.
	Also []string `json:"also,omitempty"`
}

// decide sets the verdict. PASS only when every gate of every pod passed
// for the whole window and every negative control held, with at least one
// when required. A FAIL names one cause and its owner, the most pressing
// first: a gate failing now (in the order api, node, workload: a later
// gate's failure often follows from an earlier one's), a negative control
// broken or invalid now, a gate or control that passes now but not for the
// whole window, no control. Missing evidence is never a pass: with no pod
// to judge, or evidence the report could not read (cannotJudge), the
// verdict is CANNOT_JUDGE and blames no team; with every evaluated gate
// passing and some not evaluated (offline, the workload gate), PARTIAL.
func (r *gatesReport) decide() {
	sort.Slice(r.Pods, func(i, j int) bool { return r.Pods[i].Pod < r.Pods[j].Pod })
	sort.Slice(r.Controls, func(i, j int) bool { return r.Controls[i].Pod < r.Controls[j].Pod })
	if r.cannotJudge != "" {
		r.Verdict = verdictReport{Outcome: outcomeCannotJudge, Summary: r.cannotJudge}
		return
	}
	type cause struct {
		rank    int
		gate    classify.Gate
		summary string
	}
	var causes []cause
	add := func(rank int, g classify.Gate, summary string) { causes = append(causes, cause{rank, g, summary}) }
	evaluated, notEvaluated := map[string]bool{}, map[string]bool{}
	for gi, g := range classify.Gates {
		for _, p := range r.Pods {
			for _, gr := range p.Gates {
				if gr.Gate != string(g) {
					continue
				}
				if gr.State == stateNotEvaluated {
					notEvaluated[gr.Gate] = true
					continue
				}
				evaluated[gr.Gate] = true
				switch {
				case gr.State != statePass:
					add(gi, g, fmt.Sprintf("gate %s of %s/%s fails (%s)", g, p.Namespace, p.Pod, gr.Reason))
				case gr.PassedWindow != nil && !*gr.PassedWindow:
					add(10+gi, g, fmt.Sprintf("gate %s of %s/%s passes now, not for the whole window (%s)", g, p.Namespace, p.Pod, gr.History))
				}
			}
		}
	}
	for _, c := range r.Controls {
		switch {
		case c.State == string(classify.ControlInvalid):
			add(5, classify.GateAPI, fmt.Sprintf("negative control %s/%s is invalid (%s): it proves nothing of the boundary, %s", c.Namespace, c.Pod, c.Reason, c.Why))
		case !c.Holds:
			add(5, classify.GateAPI, fmt.Sprintf("negative control %s/%s is broken (%s): its selector does not keep it from a device", c.Namespace, c.Pod, c.Reason))
		case c.HeldWindow != nil && !*c.HeldWindow:
			add(15, classify.GateAPI, fmt.Sprintf("negative control %s/%s holds now, not for the whole window (%s)", c.Namespace, c.Pod, c.History))
		}
	}
	noPod := fmt.Sprintf("no DRA pod with gates in namespace %s%s", r.Namespace, selectorNote(r.Selector))
	if len(causes) > 0 && len(r.Pods) == 0 {
		add(20, classify.GateAPI, noPod)
	}
	if len(causes) == 0 && len(r.Pods) == 0 {
		r.Verdict = verdictReport{Outcome: outcomeCannotJudge, Summary: noPod + ": nothing to judge" + r.noPodHint}
		return
	}
	if r.RequireControl && len(r.Controls) == 0 {
		add(21, classify.GateAPI, fmt.Sprintf("no negative control in namespace %s (a pod labelled as one, whose selector matches no device)", r.Namespace))
	}
	if len(causes) > 0 {
		sort.SliceStable(causes, func(i, j int) bool { return causes[i].rank < causes[j].rank })
		c := causes[0]
		r.Verdict = verdictReport{Outcome: outcomeFail, Gate: string(c.gate), Owner: c.gate.Owner(), Summary: c.summary}
		for _, o := range causes[1:] {
			r.Verdict.Also = append(r.Verdict.Also, o.summary)
		}
		return
	}
	held := ""
	if len(r.Controls) > 0 {
		held = fmt.Sprintf(", %d negative control(s) held", len(r.Controls))
	}
	if len(notEvaluated) > 0 {
		r.Verdict = verdictReport{Outcome: outcomePartial, Summary: fmt.Sprintf("%s pass for %d pod(s)%s; %s not evaluated (%s)",
			joinGates(evaluated), len(r.Pods), held, joinGates(notEvaluated), "needs Prometheus: readiness and GPU activity over a window")}
		return
	}
	v := verdictReport{Outcome: outcomePass, Pass: true, Summary: fmt.Sprintf("every gate of %d pod(s) passed", len(r.Pods))}
	if r.Window != "" {
		v.Summary += " for the whole window (" + r.Window + ")"
	}
	v.Summary += held
	r.Verdict = v
}

// joinGates names the gates of set in the gates' order: "api and node".
func joinGates(set map[string]bool) string {
	var names []string
	for _, g := range classify.Gates {
		if set[string(g)] {
			names = append(names, string(g))
		}
	}
	switch len(names) {
	case 0:
		return "no gate"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func selectorNote(sel string) string {
	if sel == "" {
		return ""
	}
	return " matching " + sel
}

func (r *gatesReport) writeJSON(w io.Writer) error {
	// Empty lists, not null: a pipeline reads .pods | length.
	if r.Pods == nil {
		r.Pods = []podGates{}
	}
	if r.Controls == nil {
		r.Controls = []controlReport{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *gatesReport) writeText(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Rollout gates of namespace %s%s at %s\n", r.Namespace, selectorNote(r.Selector), r.At.UTC().Format(time.RFC3339))
	if r.Window != "" {
		fmt.Fprintf(b, "from %s, window %s (%d evaluations)\n", r.Source, r.Window, r.Evaluations)
	} else {
		fmt.Fprintf(b, "from bundle %s (gates api and node; workload needs Prometheus)\n", r.Source)
	}
	for _, p := range r.Pods {
		node := p.Node
		if node == "" {
			node = "not bound"
		}
		fmt.Fprintf(b, "\nPod %s/%s (uid %s, node %s)\n", p.Namespace, p.Pod, p.PodUID, node)
		for _, g := range p.Gates {
			status := g.State
			if g.Reason != "" {
				status += " " + g.Reason
			}
			switch {
			case g.State == stateNotEvaluated:
			case g.PassedWindow != nil && *g.PassedWindow:
				status += ", the whole window"
			case g.History != "":
				status += ", " + g.History
			}
			fmt.Fprintf(b, "  %-9s %s\n", g.Gate, status)
			fmt.Fprintf(b, "            owner: %s\n", g.Owner)
			for _, e := range g.Evidence {
				fmt.Fprintf(b, "            - %s\n", e)
			}
		}
	}
	b.WriteString("\nNegative controls\n")
	if len(r.Controls) == 0 {
		b.WriteString("  none")
		if r.RequireControl {
			b.WriteString(" (one is required)")
		}
		b.WriteString("\n")
	}
	for _, c := range r.Controls {
		line := fmt.Sprintf("  %s/%s (uid %s): %s %s", c.Namespace, c.Pod, c.PodUID, c.State, c.Reason)
		if c.Why != "" {
			line += ": " + c.Why
		}
		switch {
		case c.HeldWindow != nil && *c.HeldWindow:
			line += ", the whole window"
		case c.History != "":
			line += ", " + c.History
		}
		b.WriteString(line + "\n")
		for _, e := range c.Evidence {
			fmt.Fprintf(b, "      - %s\n", e)
		}
	}
	fmt.Fprintf(b, "\nVerdict: %s: %s\n", r.Verdict.Outcome, r.Verdict.Summary)
	if r.Verdict.Owner != "" {
		fmt.Fprintf(b, "Owner: %s\n", r.Verdict.Owner)
	}
	for _, a := range r.Verdict.Also {
		fmt.Fprintf(b, "Also: %s\n", a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
