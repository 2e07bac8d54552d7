// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-specialize="topology=2x4 shapes=M=100" 

// What mk-specialize rejects, each with a located error.

// A binding for a symbol the program does not declare.
// expected-error @+1 {{'M' is not a shape symbol of @other (it declares [X, Y])}}
mk.program @other [X, Y] mesh <?x?> () {}

// -----

// A symbol left unbound.
// expected-error @+1 {{shape symbol 'N' of @unbound is not bound; give shapes=N=VALUE}}
mk.program @unbound [M, N] mesh <?x?> () {}

// -----

// A program bound to another topology.
// expected-error @+1 {{@fixed runs on #mk.mesh<1x8>, not on topology 2x4}}
mk.program @fixed [M] mesh <1x8> () {}

// -----

// A binding that conflicts with the program's own.
// expected-error @+1 {{shape symbol 'M' of @conflict is 64, not 100}}
mk.program @conflict [M = 64] mesh <?x?> () {}
