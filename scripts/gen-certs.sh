#!/usr/bin/env bash
# A local CA and one certificate per role for the embedded mode's mTLS control plane (docs/security.md).
# Usage: scripts/gen-certs.sh [DIR] [ROLE...]   (default DIR ./certs; default roles router broker admission admin
#        parent client condense). Writes DIR/ca.pem, DIR/ca.key and DIR/ROLE.pem + DIR/ROLE.key (0600).
# Every certificate is valid for 127.0.0.1, ::1, localhost and its role name, as server and as client.
# A client's certificate is its identity (CN = ROLE): with --tls-client-ca the leaf broker binds client
# names to it, so give each client its own, e.g. scripts/gen-certs.sh certs pmu1 ems (docs/security.md).
# An existing CA is reused, so running it again renews role certificates (rotation: the servers
# pick up the new files for new connections without a restart, core/tls.py).
set -euo pipefail
dir=${1:-certs}
shift || true
roles=("$@")
[ ${#roles[@]} -gt 0 ] || roles=(router broker admission parent admin client condense)
days=${GRIDSTAT_CERT_DAYS:-825}
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=gridstat local CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
fi
for role in "${roles[@]}"; do
  ext=$(mktemp)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost,DNS:%s\n' "$role" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$role" \
    -keyout "$dir/$role.key.new" -out "$dir/$role.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$role.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" -extfile "$ext" -out "$dir/$role.pem.new" 2>/dev/null
  # Key first, then certificate, each by rename: a reader sees an old or a new pair, never half a file.
  mv "$dir/$role.key.new" "$dir/$role.key"
  mv "$dir/$role.pem.new" "$dir/$role.pem"
  rm -f "$dir/$role.csr" "$ext"
done
echo "CA $dir/ca.pem; certificates: ${roles[*]}"
