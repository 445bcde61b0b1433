"""Tests of server/gateway/auth/."""
