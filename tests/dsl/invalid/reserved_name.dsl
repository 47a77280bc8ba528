model tiny
let N = 4
