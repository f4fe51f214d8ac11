package main

// The flags every command that reads the cluster shares, worded once so
// that each command's help says the same thing, and says what
// kube.RESTConfig does.

import (
	"fmt"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/internal/kube"
)

// kubeconfigHelp is the order kube.RESTConfig tries.
const kubeconfigHelp = "Path to a kubeconfig (default: $KUBECONFIG, else the in-cluster config, else ~/.kube/config)."

// kubeconfigFlag is --kubeconfig, defined here once for every command.
func kubeconfigFlag(app *kingpin.Application) *kingpin.FlagClause {
	return app.Flag("kubeconfig", kubeconfigHelp).PlaceHolder("PATH")
}

// contextHelp: kube.RESTConfig tries the in-cluster config only when
// neither a kubeconfig nor a context is named.
const contextHelp = "The kubeconfig context to use (default: its current context), as kubectl's --context; with it, the in-cluster config is not tried."

func registerKubeconfig(app *kingpin.Application) *string { return kubeconfigFlag(app).String() }

// registerContext is kubectl's --context, which kubectl hands a plugin
// untouched.
func registerContext(app *kingpin.Application) *string {
	return app.Flag("context", contextHelp).PlaceHolder("CONTEXT").String()
}

// registerNamespace is kubectl's -n, which kubectl hands a plugin
// untouched: "kubectl dra-exporter gates -n llm-canary".
func registerNamespace(app *kingpin.Application) *string {
	return app.Flag("namespace", "The namespace, as kubectl's -n (instead of the NAMESPACE argument).").Short('n').PlaceHolder("NAMESPACE").String()
}

// kubeTarget is the cluster a command reads: a kubeconfig and a context of
// it (both optional).
type kubeTarget struct {
	kubeconfig, context string
}

// kubeClient is a client of the target cluster (get and list are all the
// commands that read the cluster ask of it).
func kubeClient(kt kubeTarget) (kubernetes.Interface, error) {
	rc, err := kube.RESTConfig(kt.kubeconfig, kt.context)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}
