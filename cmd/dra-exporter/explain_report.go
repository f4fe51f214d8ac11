package main

// explain's report: the decision tree's links and verdict, a negative
// control's judgement, and the leaks that name the pod, as text or JSON.

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/dra-exporter/dra-exporter/internal/classify"
)

type explainReport struct {
	verdict classify.Verdict
	// control is the pod's judgement as a negative control; nil when the
	// pod is not one.
	control *classify.ControlResult
	leaks   []explainLeak
}

type explainLeak struct {
	Claim  string `json:"claim"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// The pod's states in explain's verdict (JSON).
const (
	explainStateReady         = "READY"
	explainStateBlocked       = "BLOCKED"
	explainStateWaiting       = "WAITING"
	explainStateNotClassified = "NOT_CLASSIFIED"
)

// state is the pod's state, as the text verdict names it.
func (r *explainReport) state() string {
	v := r.verdict
	switch {
	case v.Blocked:
		return explainStateBlocked
	case v.Note != "":
		return explainStateNotClassified
	case v.ReadyDespite, v.Pod.Ready():
		return explainStateReady
	}
	return explainStateWaiting
}

// exitCode: 0 the pod is Ready (and no link blocks it), or a negative
// control holds; 1 otherwise.
func (r *explainReport) exitCode() int {
	if r.control != nil {
		if r.control.State == classify.ControlHolds {
			return explainReady
		}
		return explainBlocked
	}
	// A Ready pod the tree does not classify (the device-plugin lane) is
	// Ready all the same.
	if !r.verdict.Blocked && r.verdict.Pod.Ready() {
		return explainReady
	}
	return explainBlocked
}

func (r *explainReport) writeText(w io.Writer) error {
	var err error
	if r.control != nil {
		err = classify.FormatControl(w, r.verdict, *r.control)
	} else {
		err = classify.Format(w, r.verdict)
	}
	if err != nil {
		return err
	}
	for _, l := range r.leaks {
		if _, err := fmt.Fprintf(w, "Leak: claim %s/%s %s: %s\n", r.verdict.Pod.Key.Namespace, l.Claim, l.Reason, l.Detail); err != nil {
			return err
		}
	}
	return nil
}

type explainJSON struct {
	Namespace       string             `json:"namespace"`
	Pod             string             `json:"pod"`
	PodUID          string             `json:"podUID"`
	Lane            string             `json:"lane,omitempty"`
	Phase           string             `json:"phase"`
	Node            string             `json:"node,omitempty"`
	Links           []explainLinkJSON  `json:"links"`
	Verdict         explainVerdictJSON `json:"verdict"`
	NegativeControl *explainControl    `json:"negativeControl,omitempty"`
	Leaks           []explainLeak      `json:"leaks,omitempty"`
}

type explainLinkJSON struct {
	Step     string   `json:"step"`
	State    string   `json:"state"`
	Layer    string   `json:"layer,omitempty"`
	Claim    string   `json:"claim,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Meaning  string   `json:"meaning,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

type explainVerdictJSON struct {
	// State is READY, BLOCKED, WAITING or NOT_CLASSIFIED.
	State       string `json:"state"`
	Layer       string `json:"layer,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Claim       string `json:"claim,omitempty"`
	DeviceClass string `json:"deviceClass,omitempty"`
	Node        string `json:"node,omitempty"`
	Device      string `json:"device,omitempty"`
	// Note says why a pod is not classified, or what it waits for.
	Note string `json:"note,omitempty"`
}

type explainControl struct {
	// State is HOLDS, BROKEN or INVALID.
	State    string   `json:"state"`
	Reason   string   `json:"reason"`
	Why      string   `json:"why,omitempty"`
	Summary  string   `json:"summary"`
	Claim    string   `json:"claim,omitempty"`
	Node     string   `json:"node,omitempty"`
	Device   string   `json:"device,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

func (r *explainReport) writeJSON(w io.Writer) error {
	v, p := r.verdict, r.verdict.Pod
	out := explainJSON{Namespace: p.Key.Namespace, Pod: p.Key.Name, PodUID: string(p.UID), Lane: v.Lane, Phase: string(p.Obj.Status.Phase),
		Node: p.Obj.Spec.NodeName, Links: []explainLinkJSON{}, Leaks: r.leaks}
	for _, l := range v.Links {
		lj := explainLinkJSON{Step: l.Step, State: string(l.State), Layer: string(l.Layer), Claim: l.Claim, Evidence: l.Evidence}
		if l.State == classify.Fail {
			lj.Reason, lj.Meaning = string(l.Reason), l.Reason.Meaning()
		}
		out.Links = append(out.Links, lj)
	}
	vj := explainVerdictJSON{State: r.state()}
	switch vj.State {
	case explainStateBlocked:
		vj.Layer, vj.Reason, vj.Claim, vj.DeviceClass, vj.Node, vj.Device = string(v.Layer), string(v.Reason), v.Claim, v.DeviceClass, v.Node, v.Device
	case explainStateNotClassified:
		vj.Note = v.Note
	case explainStateWaiting:
		vj.Note = classify.WaitingFor(v)
	}
	out.Verdict = vj
	if c := r.control; c != nil {
		out.NegativeControl = &explainControl{State: string(c.State), Reason: c.Reason, Why: c.Why, Summary: c.Summary(),
			Claim: c.Claim, Node: c.Node, Device: c.Device, Evidence: c.Evidence}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
