module github.com/stampede-go/stampede/release

go 1.26.0
