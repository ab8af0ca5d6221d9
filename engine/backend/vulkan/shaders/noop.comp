#version 450
// Does nothing: measures dispatch overhead and warms the queue in tests.
layout(local_size_x = 1) in;
void main() {}
