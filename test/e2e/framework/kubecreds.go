package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ClientCert returns a client certificate and key (PEM) for the user cn in the groups
// orgs, signed by the control plane's client CA (which kube-apiserver and the lab's
// kubelets trust), valid for 6 hours: a kubelet's system:node:<name> in system:nodes, or
// the CCM's user, as kubeadm issues them.
func ClientCert(cp *ControlPlane, cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := loadClientCA(cp)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(6 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a client certificate for %s: %w", cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ClientTLSCert is ClientCert as a tls.Certificate.
func ClientTLSCert(cp *ControlPlane, cn string, orgs ...string) (tls.Certificate, error) {
	certPEM, keyPEM, err := ClientCert(cp, cn, orgs...)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// WriteClientKubeconfig writes to path (mode 0600) a kubeconfig for a client
// certificate (see ClientCert) that reaches the API server at server and verifies it
// with its serving CA, all data inline, so the file works wherever it is mounted.
func WriteClientKubeconfig(cp *ControlPlane, path, server, cn string, orgs ...string) error {
	certPEM, keyPEM, err := ClientCert(cp, cn, orgs...)
	if err != nil {
		return err
	}
	caFile := filepath.Join(filepath.Dir(path), ".apiserver-ca-"+filepath.Base(path))
	if err := writeServingCA(filepath.Join(cp.Dir, "certs", "apiserver.crt"), caFile); err != nil {
		return err
	}
	ca, err := os.ReadFile(caFile)
	os.Remove(caFile)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos[cn] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: cn}
	kc.CurrentContext = "lab"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// loadClientCA reads the client CA hack/lab/control-plane.sh created for the control
// plane (kube-apiserver --client-ca-file).
func loadClientCA(cp *ControlPlane) (*x509.Certificate, any, error) {
	certPEM, err := os.ReadFile(filepath.Join(cp.Dir, "certs", "client-ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("client CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(cp.Dir, "certs", "client-ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("client CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("client CA: no PEM data")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("client CA: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if ec, ecErr := x509.ParseECPrivateKey(kb.Bytes); ecErr == nil {
			return cert, ec, nil
		}
		return nil, nil, fmt.Errorf("client CA key: %w", err)
	}
	return cert, key, nil
}
