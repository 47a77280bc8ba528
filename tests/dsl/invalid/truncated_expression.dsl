model tiny
let a = 2 *
let b = 3
