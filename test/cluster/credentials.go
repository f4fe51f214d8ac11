package cluster

// The control plane's credentials: static tokens, the CA, kubeconfigs.

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func (cp *ControlPlane) writeCredentials() error {
	certs := filepath.Join(cp.Dir, "certs")
	tokens := AdminToken + `,admin,admin-uid,"system:masters"` + "\n"
	if n := cp.opts.node; n != nil {
		tokens += KubeletToken + ",system:node:" + n.Name + ",kubelet-" + n.Name + `,"system:nodes"` + "\n"
	}
	if err := os.WriteFile(filepath.Join(certs, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := os.WriteFile(filepath.Join(certs, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(certs, "sa.pub"), pub, 0o600)
}

func (cp *ControlPlane) writeAdminKubeconfig() error {
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.Kubeconfig, cp.APIServer, filepath.Join(cp.Dir, "certs", "apiserver.crt"), AdminToken); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cp.Admin = cfg
	cp.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// WriteKubeconfig writes a kubeconfig that authenticates with a bearer token.
func WriteKubeconfig(path, server, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// CAFile is the API server's self-signed serving certificate.
func (cp *ControlPlane) CAFile() string { return filepath.Join(cp.Dir, "certs", "apiserver.crt") }
