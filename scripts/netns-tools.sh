#!/usr/bin/env bash
# The tools the kernel-level chaos scenarios (gridstat.chaos.netns, docs/chaos.md) need: ip and tc
# (iproute2), nft (nftables: loss with numgen, duplication with dup, cut with drop) and iptables
# (the NFQUEUE target for delay and reordering: this kernel has no nft queue expression and no
# sch_netem). Installed with apt-get when missing; idempotent, and nothing to do once installed.
#
#   scripts/netns-tools.sh          install what is missing
#   scripts/netns-tools.sh check    exit 0 when every tool is there, 1 otherwise (nothing installed)
set -euo pipefail
die() { echo "netns-tools.sh: $*" >&2; exit 1; }

# tool:Debian package
tools="ip:iproute2 tc:iproute2 nft:nftables iptables:iptables"
missing=()
for t in $tools; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
if [ "${1:-}" = check ]; then
  [ ${#missing[@]} -eq 0 ]
  exit
fi
[ ${#missing[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null 2>&1 || die "apt-get is not available to install ${missing[*]}"
[ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root"
echo "netns-tools.sh: installing ${missing[*]} with apt-get" >&2
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
  apt-get update -q >&2
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
  || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       "${missing[@]}" >&2; } || die "apt-get could not install ${missing[*]}"
