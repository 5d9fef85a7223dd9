"""Generated gRPC code (scripts/gen-protos.sh); do not edit."""
