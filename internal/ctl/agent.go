package ctl

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
)

// agentCredentials are the inputs of a per-node agent kubeconfig (the flags).
type agentCredentials struct {
	node          string
	caCert, caKey string // the cluster's client CA, which signs the certificate
	caBundle      string // verifies the API server; "" means caCert
	server        string
	tlsServerName string
	validity      time.Duration
}

// agentKubeconfigCmd is `baremetal-ccmctl agent kubeconfig`: what `kubeadm kubeconfig
// user --client-name system:baremetal-ccm-agent:NODE --org system:baremetal-ccm-agents`
// does. It writes the kubeconfig only when every input is valid. Exit status: 0
// written, 1 on a write failure, 2 on usage errors and bad inputs.
func agentKubeconfigCmd(args []string, stdout, stderr io.Writer) int {
	var c agentCredentials
	fs := flag.NewFlagSet("agent kubeconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.node, "node", "", "the Node's name (the certificate's CN is "+manifests.AgentUserPrefix+"NODE)")
	fs.StringVar(&c.caCert, "ca-cert", "", "the cluster's client CA certificate (kubeadm: /etc/kubernetes/pki/ca.crt)")
	fs.StringVar(&c.caKey, "ca-key", "", "the client CA's private key, PEM: PKCS#1, PKCS#8 or SEC1 (kubeadm: /etc/kubernetes/pki/ca.key)")
	fs.StringVar(&c.caBundle, "ca-bundle", "", "CA bundle that verifies the API server's certificate (default: --ca-cert)")
	fs.StringVar(&c.server, "server", "", "the API server's URL, https://HOST[:PORT]")
	fs.StringVar(&c.tlsServerName, "tls-server-name", "", "name to verify the API server's certificate against, if not the --server host")
	fs.DurationVar(&c.validity, "validity", 8760*time.Hour, "lifetime of the client certificate")
	out := fs.String("out", "", "file to write the kubeconfig to, mode 0600 (default: standard output)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "baremetal-ccmctl: unexpected arguments %q\n", fs.Args())
		return 2
	}
	data, err := c.kubeconfig(time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: %v\n", err)
		return 2
	}
	if *out == "" {
		_, _ = stdout.Write(data)
		return 0
	}
	if err := writePrivate(*out, data); err != nil {
		fmt.Fprintf(stderr, "baremetal-ccmctl: --out: %v\n", err)
		return 1
	}
	return 0
}

// kubeconfig validates c (all errors at once, each naming its flag), then signs a
// fresh ECDSA P-256 key's client certificate with the CA and returns a kubeconfig
// embedding the key, the certificate and the CA bundle.
func (c agentCredentials) kubeconfig(now time.Time) ([]byte, error) {
	var errs []error
	read := func(flagName, path string) []byte {
		if path == "" {
			errs = append(errs, fmt.Errorf("--%s is required", flagName))
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flagName, err))
			return nil
		}
		return data
	}
	if c.node == "" {
		errs = append(errs, errors.New("--node is required"))
	} else if msgs := validation.IsDNS1123Subdomain(c.node); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--node %q is not a valid Node name: %s", c.node, strings.Join(msgs, "; ")))
	}
	if u, err := url.Parse(c.server); c.server == "" {
		errs = append(errs, errors.New("--server is required"))
	} else if err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("--server %q: want https://HOST[:PORT]", c.server))
	}
	if c.validity <= 0 {
		errs = append(errs, fmt.Errorf("--validity %s: must be positive", c.validity))
	}
	var ca *x509.Certificate
	caPEM := read("ca-cert", c.caCert)
	if caPEM != nil {
		var err error
		if ca, err = parseCACert(caPEM); err != nil {
			errs = append(errs, fmt.Errorf("--ca-cert: %w", err))
		}
	}
	var key crypto.Signer
	if keyPEM := read("ca-key", c.caKey); keyPEM != nil {
		var err error
		if key, err = parsePrivateKey(keyPEM); err != nil {
			errs = append(errs, fmt.Errorf("--ca-key: %w", err))
		}
	}
	if ca != nil && key != nil {
		if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ca.PublicKey) {
			errs = append(errs, errors.New("--ca-key does not match --ca-cert"))
		}
	}
	if ca != nil && c.validity > 0 && now.Add(c.validity).After(ca.NotAfter) {
		errs = append(errs, fmt.Errorf("--validity %s: the certificate would outlive the CA (--ca-cert expires %s)", c.validity, ca.NotAfter.UTC().Format(time.RFC3339)))
	}
	bundle := caPEM
	if c.caBundle != "" {
		if bundle = read("ca-bundle", c.caBundle); bundle != nil && !x509.NewCertPool().AppendCertsFromPEM(bundle) {
			errs = append(errs, errors.New("--ca-bundle: no PEM certificate"))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the client key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	notBefore := now.Add(-5 * time.Minute) // tolerate the API server's clock being behind
	if notBefore.Before(ca.NotBefore) {
		notBefore = ca.NotBefore
	}
	user := manifests.AgentUserName(c.node)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: user, Organization: []string{manifests.AgentGroup}},
		NotBefore:             notBefore,
		NotAfter:              now.Add(c.validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &clientKey.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing the client certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the client key: %w", err)
	}

	const cluster = "kubernetes"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{Server: c.server, TLSServerName: c.tlsServerName, CertificateAuthorityData: bundle}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		ClientKeyData:         pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	kc.Contexts[user+"@"+cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	kc.CurrentContext = user + "@" + cluster
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("encoding the kubeconfig: %w", err)
	}
	return data, nil
}

// parseCACert returns the first certificate of a PEM file; it must be a CA that may
// sign certificates.
func parseCACert(data []byte) (*x509.Certificate, error) {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing the certificate: %w", err)
		}
		if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
			return nil, fmt.Errorf("%q is not a CA certificate that may sign certificates", cert.Subject.String())
		}
		return cert, nil
	}
	return nil, errors.New("no PEM certificate")
}

// parsePrivateKey returns the first private key of a PEM file: PKCS#1 (RSA), SEC1
// (EC) or unencrypted PKCS#8 (RSA, EC or Ed25519).
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		var (
			key any
			err error
		)
		switch block.Type {
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("the key is encrypted; decrypt it first (openssl pkey)")
		default:
			continue // e.g. EC PARAMETERS before a SEC1 key
		}
		if err != nil {
			return nil, fmt.Errorf("parsing the %s: %w", strings.ToLower(block.Type), err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", key)
		}
		return signer, nil
	}
	return nil, errors.New("no PEM private key (want RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY)")
}

// writePrivate writes data to path with mode 0600, also when path exists with a wider
// mode.
func writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
