model tiny
let x = 12abc
