package objects

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Problem is an object of the input that was skipped.
type Problem struct {
	File string
	// Doc is the YAML document (from 1); Item the List item (from 1, 0 when
	// the document is not a List).
	Doc, Item int
	// What names the object when it could be read far enough.
	What string
	Err  error
}

func (p Problem) String() string {
	return p.Location() + ": " + p.Err.Error()
}

// Location names the object: its file, document, List item, and kind and
// name when it could be read far enough.
func (p Problem) Location() string {
	loc := fmt.Sprintf("%s: document %d", p.File, p.Doc)
	if p.Item > 0 {
		loc += fmt.Sprintf(", item %d", p.Item)
	}
	if p.What != "" {
		loc += " (" + p.What + ")"
	}
	return loc
}

// ErrIgnoredKind marks a well-formed object of a kind the index does not use.
var ErrIgnoredKind = errors.New("kind not used by dra-exporter, skipped")

var decoder = serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()

// Supported reports whether the exporter reads objects of this kind.
func Supported(obj runtime.Object) bool {
	switch obj.(type) {
	case *resourceapi.DeviceClass, *resourceapi.ResourceSlice, *resourceapi.ResourceClaim, *resourceapi.DeviceTaintRule,
		*corev1.Pod, *corev1.Node, *corev1.Event, *eventsv1.Event:
		return true
	}
	return false
}

// LoadFiles reads every file. A file that cannot be opened is an error; an
// object that cannot be decoded, or is of an unused kind, is a Problem.
func LoadFiles(paths []string) ([]runtime.Object, []Problem, error) {
	var objs []runtime.Object
	var problems []Problem
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("read objects: %w", err)
		}
		o, p, err := Load(path, f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, o...)
		problems = append(problems, p...)
	}
	return objs, problems, nil
}

// Load reads YAML or JSON documents from r; each is an object or a List.
// JSON may be one value, a stream of values (`kubectl get -o json >> f`,
// JSON Lines) or an array of objects; YAML may hold many documents. UTF-8
// and UTF-16 (with a byte-order mark) are read.
func Load(name string, r io.Reader) ([]runtime.Object, []Problem, error) {
	raw, err := io.ReadAll(transform.NewReader(r, unicode.BOMOverride(unicode.UTF8.NewDecoder())))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	var objs []runtime.Object
	var problems []Problem
	add := func(doc int, data []byte) {
		o, p := decodeDocument(name, doc, data)
		objs = append(objs, o...)
		problems = append(problems, p...)
	}
	if isJSON(raw) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		for doc := 1; ; doc++ {
			var v json.RawMessage
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				// A JSON stream cannot be resynchronised after a syntax error.
				problems = append(problems, Problem{File: name, Doc: doc, Err: fmt.Errorf("malformed JSON, the rest of the file is skipped: %w", err)})
				break
			}
			add(doc, v)
		}
		return objs, problems, nil
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for doc := 1; ; doc++ {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		chunk = dropDocumentEnd(chunk)
		if len(bytes.TrimSpace(chunk)) == 0 {
			continue
		}
		data, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			problems = append(problems, Problem{File: name, Doc: doc, Err: fmt.Errorf("malformed YAML: %w", err)})
			continue
		}
		add(doc, data)
	}
	return objs, problems, nil
}

// isJSON reports whether the input starts like JSON: an object or an array.
func isJSON(raw []byte) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// dropDocumentEnd removes YAML document-end markers ("..."), which the
// document splitter leaves in place.
func dropDocumentEnd(chunk []byte) []byte {
	if !bytes.Contains(chunk, []byte("...")) {
		return chunk
	}
	lines := bytes.SplitAfter(chunk, []byte("\n"))
	out := lines[:0]
	for _, l := range lines {
		if string(bytes.TrimRight(l, " \t\r\n")) == "..." {
			continue
		}
		out = append(out, l)
	}
	return bytes.Join(out, nil)
}

// decodeDocument decodes one JSON document: an object, a List (of any
// kind, typed or not) or an array of objects.
func decodeDocument(name string, doc int, data []byte) ([]runtime.Object, []Problem) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return nil, nil
	}
	var objs []runtime.Object
	var problems []Problem
	items := func(list []json.RawMessage, apiVersion, itemKind string) {
		for i, item := range list {
			if itemKind != "" {
				item = withTypeMeta(item, apiVersion, itemKind)
			}
			obj, p := decode(item)
			if p != nil {
				p.File, p.Doc, p.Item = name, doc, i+1
				problems = append(problems, *p)
				continue
			}
			objs = append(objs, obj)
		}
	}
	if data[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, []Problem{{File: name, Doc: doc, Err: fmt.Errorf("malformed JSON array: %w", err)}}
		}
		items(list, "", "")
		return objs, problems
	}
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, []Problem{{File: name, Doc: doc, Err: fmt.Errorf("malformed object: %w", err)}}
	}
	if strings.HasSuffix(head.Kind, "List") {
		// A typed list (PodList) straight from the API omits each item's
		// apiVersion and kind: they follow from the list.
		itemKind := ""
		if head.Kind != "List" {
			itemKind = strings.TrimSuffix(head.Kind, "List")
		}
		items(head.Items, head.APIVersion, itemKind)
		return objs, problems
	}
	obj, p := decode(data)
	if p != nil {
		p.File, p.Doc = name, doc
		return nil, []Problem{*p}
	}
	return []runtime.Object{obj}, nil
}

// decode turns one JSON object into a typed object. resource.k8s.io/v1beta2
// has the same schema as v1 and is read as v1.
func decode(data []byte) (runtime.Object, *Problem) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, &Problem{Err: fmt.Errorf("malformed object: %w", err)}
	}
	what := tm.Kind
	if tm.Metadata.Name != "" {
		what += " " + strings.TrimPrefix(tm.Metadata.Namespace+"/"+tm.Metadata.Name, "/")
	}
	if tm.Kind == "" || tm.APIVersion == "" {
		return nil, &Problem{What: what, Err: errors.New("object has no apiVersion or kind")}
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, &Problem{What: what, Err: fmt.Errorf("bad apiVersion %q: %w", tm.APIVersion, err)}
	}
	if gv.Group == resourceapi.GroupName && gv.Version == "v1beta2" {
		data, err = setAPIVersion(data, resourceapi.SchemeGroupVersion.String())
		if err != nil {
			return nil, &Problem{What: what, Err: err}
		}
	} else if gv.Group == resourceapi.GroupName && gv.Version != "v1" {
		return nil, &Problem{What: what, Err: fmt.Errorf("%s is not supported; export objects as resource.k8s.io/v1 (kubectl on 1.34+ does)", tm.APIVersion)}
	}
	obj, _, err := decoder.Decode(data, nil, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			return nil, &Problem{What: what, Err: fmt.Errorf("unknown kind %s %s, skipped", tm.APIVersion, tm.Kind)}
		}
		return nil, &Problem{What: what, Err: fmt.Errorf("malformed object: %w", err)}
	}
	if !Supported(obj) {
		return nil, &Problem{What: what, Err: ErrIgnoredKind}
	}
	return obj, nil
}

func setAPIVersion(data []byte, apiVersion string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("malformed object: %w", err)
	}
	m["apiVersion"] = apiVersion
	return json.Marshal(m)
}

// withTypeMeta fills in apiVersion and kind when an item lacks them.
func withTypeMeta(item json.RawMessage, apiVersion, kind string) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(item, &m); err != nil {
		return item // decode reports it
	}
	if m["apiVersion"] != nil && m["kind"] != nil {
		return item
	}
	if m["apiVersion"] == nil {
		m["apiVersion"] = apiVersion
	}
	if m["kind"] == nil {
		m["kind"] = kind
	}
	out, err := json.Marshal(m)
	if err != nil {
		return item
	}
	return out
}
